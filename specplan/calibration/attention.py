"""Attention over per-request KV slots for mixed batches (torch): what a replayed step runs per layer.

Each live request holds a slot of ``slot_len`` tokens in every layer's flat cache. On CUDA,
``VarlenAttention`` makes one FlashAttention-2 varlen call per layer for all rows (prefill chunks and
verify rows alike, each reading ``context + query`` keys of its slot), checked first by
``varlen_attention_check``; elsewhere ``RowAttention`` makes one SDPA call per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from specplan.calibration.stack import DecoderStack

CHECK_SLOT_TOKENS = 512  # the varlen kernel's check uses 3 slots of this size; the stack holds at least that


def positions(query: np.ndarray, context: np.ndarray) -> np.ndarray:
    """Each token's position in its request: ``context .. context + query - 1`` per row."""
    starts = np.cumsum(query) - query
    return np.arange(int(query.sum())) - np.repeat(starts, query) + np.repeat(context, query)


@dataclass
class RowsMeta:
    """Per-step inputs of ``RowAttention``: cache rows to write, row sizes, and per layer each row's
    ``(K view, V view, causal mask)`` (views of the cache, built once per step, outside the timing)."""

    kv_index: torch.Tensor
    sizes: list[int]
    rows: list[list[tuple[torch.Tensor, torch.Tensor, object]]]


class RowAttention:
    """One SDPA call per row over its slot's cache view ``[kv_heads, context + query, head_dim]``.

    Only the SDPA call is per row: the queries are split and the outputs joined once per layer.
    """

    name = "torch SDPA, one call per row over the request's KV slot"

    def __init__(self, stack: DecoderStack, num_slots: int, slot_len: int) -> None:
        self.stack, self.slot_len = stack, slot_len
        n = num_slots * stack.kvh * slot_len * stack.hd
        self.caches = [(lay["k"][:n].view(num_slots, stack.kvh, slot_len, stack.hd),
                        lay["v"][:n].view(num_slots, stack.kvh, slot_len, stack.hd)) for lay in stack.layers]

    def plan(self, slots: np.ndarray, query: np.ndarray, context: np.ndarray) -> RowsMeta:
        """Cache rows to write (slot, head, position) and each row's cache views and mask."""
        pos = positions(query, context)
        heads = np.arange(self.stack.kvh)
        index = ((np.repeat(slots, query)[:, None] * self.stack.kvh + heads[None, :]) * self.slot_len
                 + pos[:, None]).ravel()
        shape = [(int(s), int(c + q), causal_lower_right(int(q), int(c + q)) if q > 1 else None)
                 for s, q, c in zip(slots, query, context)]
        rows = [[(kc[s:s + 1, :, :n], vc[s:s + 1, :, :n], mask) for s, n, mask in shape] for kc, vc in self.caches]
        return RowsMeta(torch.from_numpy(index).to(self.stack.device), query.tolist(), rows)

    def __call__(self, i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: RowsMeta) -> torch.Tensor:
        kc, vc = self.caches[i]
        hd = self.stack.hd
        kc.view(-1, hd).index_copy_(0, meta.kv_index, k.reshape(-1, hd))
        vc.view(-1, hd).index_copy_(0, meta.kv_index, v.reshape(-1, hd))
        parts = q.transpose(0, 1).unsqueeze(0).split(meta.sizes, dim=2)
        out = [self.stack.sdpa(qr, kr, vr, mask) for qr, (kr, vr, mask) in zip(parts, meta.rows[i])]
        joined = out[0] if len(out) == 1 else torch.cat(out, dim=2)
        return joined[0].transpose(0, 1).reshape(q.shape[0], -1)


@dataclass
class VarlenMeta:
    """Per-step inputs of ``VarlenAttention`` (device tensors, plus the two maxima the kernel takes)."""

    kv_index: torch.Tensor
    cu_q: torch.Tensor
    k_start: torch.Tensor
    seqused_k: torch.Tensor
    max_q: int
    max_k: int


def flash_varlen(q, k, v, cu_q, k_start, max_q, max_k, seqused_k) -> torch.Tensor:
    """FlashAttention-2's varlen forward (``aten::_flash_attention_forward``, stable since torch 2.4): row b's
    queries ``q[cu_q[b]:cu_q[b+1]]`` attend, bottom-right causal, to keys ``k[k_start[b]:][:seqused_k[b]]``.
    With ``seqused_k`` given, ``k_start`` holds each row's offset into ``k`` (the next entry is not read)."""
    return torch.ops.aten._flash_attention_forward(q, k, v, cu_q, k_start, max_q, max_k, 0.0, True, False,
                                                   seqused_k=seqused_k)[0]


def varlen_reference(q, k, v, cu_q, k_start, max_q, max_k, seqused_k) -> torch.Tensor:
    """What ``flash_varlen`` computes, row by row with SDPA (KV heads expanded); for checks, never for timing."""
    groups = q.shape[1] // k.shape[1]
    cu, starts, used = cu_q.tolist(), k_start.tolist(), seqused_k.tolist()
    out = torch.empty_like(q)
    for b, (start, length) in enumerate(zip(starts, used)):
        s, e = cu[b], cu[b + 1]
        kb, vb = (x[start:start + length].transpose(0, 1).repeat_interleave(groups, 0) for x in (k, v))
        mask = causal_lower_right(e - s, length) if e - s > 1 else None
        out[s:e] = F.scaled_dot_product_attention(q[s:e].transpose(0, 1)[None], kb[None], vb[None],
                                                  attn_mask=mask)[0].transpose(0, 1)
    return out


class VarlenAttention:
    """One varlen attention call per layer over the request slots, token-major ``[slots * slot_len, kv_heads,
    head_dim]``: each row reads its slot from its offset, ``context + query`` keys long.

    ``attn`` is ``flash_varlen`` on CUDA; a test may pass ``varlen_reference``.
    """

    name = "FlashAttention-2 varlen (aten::_flash_attention_forward) over per-request KV slots, one call per layer"

    def __init__(self, stack: DecoderStack, num_slots: int, slot_len: int, attn: Callable = flash_varlen) -> None:
        self.stack, self.slot_len, self.attn = stack, slot_len, attn
        n = num_slots * slot_len * stack.kvh * stack.hd
        self.caches = [(lay["k"][:n].view(num_slots * slot_len, stack.kvh, stack.hd),
                        lay["v"][:n].view(num_slots * slot_len, stack.kvh, stack.hd)) for lay in stack.layers]

    def plan(self, slots: np.ndarray, query: np.ndarray, context: np.ndarray) -> VarlenMeta:
        dev = self.stack.device
        seq = context + query

        def i32(a):
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(dev)

        start = slots * self.slot_len
        return VarlenMeta(torch.from_numpy(np.repeat(start, query) + positions(query, context)).to(dev),
                          i32(np.concatenate([[0], np.cumsum(query)])), i32(np.append(start, start[-1] + seq[-1])),
                          i32(seq), int(query.max()), int(seq.max()))

    def __call__(self, i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: VarlenMeta) -> torch.Tensor:
        kc, vc = self.caches[i]
        kc.index_copy_(0, meta.kv_index, k)
        vc.index_copy_(0, meta.kv_index, v)
        out = self.attn(q, kc, vc, meta.cu_q, meta.k_start, meta.max_q, meta.max_k, meta.seqused_k)
        return out.reshape(q.shape[0], -1)


def rope_cache(stack: DecoderStack, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary tables for positions ``0 .. length - 1``, shaped ``[length, 1, head_dim]`` for indexing."""
    cos, sin = stack.rope_tables(0, length)
    return cos[0], sin[0]


def varlen_attention_check(stack: DecoderStack) -> Optional[str]:
    """None when ``flash_varlen`` runs here, matches ``varlen_reference`` and captures in a CUDA graph, for a
    mixed batch and an all-decode one (FlashAttention takes another path when every row has one query);
    else the reason it cannot be used."""
    if not stack.device.startswith("cuda"):
        return "the FlashAttention varlen kernel needs CUDA"
    attention = VarlenAttention(stack, 3, CHECK_SLOT_TOKENS)
    gen = torch.Generator(device=stack.device).manual_seed(0)
    slots = np.array([2, 0, 1])
    try:
        cases = ((np.array([3, 1, 5]), np.array([5, 300, 0])), (np.ones(3, np.int64), np.array([7, 1, 40])))
        for query, context in cases:
            n = int(query.sum())
            q = torch.randn(n, stack.qh, stack.hd, device=stack.device, generator=gen).to(stack.dtype)
            k, v = (torch.randn(n, stack.kvh, stack.hd, device=stack.device, generator=gen).to(stack.dtype)
                    for _ in range(2))
            meta = attention.plan(slots, query, context)
            got = attention(0, q, k, v, meta)
            kc, vc = attention.caches[0]
            want = varlen_reference(q, kc, vc, meta.cu_q, meta.k_start, meta.max_q, meta.max_k, meta.seqused_k)
            err = float((got.float() - want.reshape(n, -1).float()).abs().max())
            if not err < 0.05:
                return f"the FlashAttention varlen kernel disagrees with SDPA here (max abs difference {err:.3g})"
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                attention(0, q, k, v, meta)
            graph.replay()
            torch.cuda.synchronize()
    except (RuntimeError, TypeError, ValueError, NotImplementedError, AttributeError) as exc:
        return f"the FlashAttention varlen kernel failed here ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
    return None
