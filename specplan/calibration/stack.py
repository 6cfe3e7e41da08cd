"""A decoder stack of a model's real shapes with random weights, and its KV cache (torch).

Every layer has its own weights, so inter-layer L2 reuse is realistic (COSTS.md §4). Under tensor
parallelism the stack is one GPU's shard (heads, MLP and vocabulary divided by TP; KV heads too,
at least one); the all-reduces are priced analytically, since one GPU cannot run them.

One step, for ``batch`` rows of ``query_len`` positions over ``context`` resident tokens: embedding;
per layer RMSNorm, fused QKV GEMM, rotary embedding, KV-cache write, attention over context + new
positions (SDPA with GQA; bottom-right causal mask when more than one position is new), O GEMM,
residual, RMSNorm, fused gate/up GEMM, SiLU*mul, down GEMM, residual; final RMSNorm and LM head on
the positions that need logits (all of a generation row's, the last of a prefill row's); greedy
argmax as the sampler. Each layer's KV cache is a flat buffer viewed as ``[batch, kv_heads,
context + query_len, head_dim]`` for the point being measured.

The pieces of a step (``layer``, ``rotary``, ``sdpa``, ``rope_tables``, ``logits``) are public so that
the fidelity replay (``replay``) runs mixed batches over a per-request cache with the same kernels.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from specplan.calibration.grid import Point
from specplan.cost_models.models import ModelSpec

ROPE_THETA = 500000.0
EPS = 1e-5

AttentionFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _rand(shape, device, dtype, gen) -> torch.Tensor:
    return (torch.randn(shape, device=device, dtype=torch.float32, generator=gen) * 0.02).to(dtype)


class DecoderStack:
    """Random-weight decoder stack; ``step(point)`` returns a closure that runs one step on static inputs."""

    def __init__(self, model: ModelSpec, tp: int, device: str, dtype: torch.dtype, max_kv_tokens: int,
                 seed: int = 0) -> None:
        self.model, self.device, self.dtype = model, device, dtype
        shard = model.shard(tp)
        self.qh, self.kvh, self.hd = shard.q_heads, shard.kv_heads, model.head_dim
        self.h, self.vocab = model.hidden, shard.vocab
        gen = torch.Generator(device=device).manual_seed(seed)
        h, hd, inter = self.h, self.hd, shard.intermediate
        self.embed = _rand((self.vocab, h), device, dtype, gen)
        self.lm_head = _rand((self.vocab, h), device, dtype, gen)
        self.final_norm = torch.ones(h, device=device, dtype=dtype)
        self.layers = []
        kv_elems = max_kv_tokens * self.kvh * hd
        for _ in range(model.num_layers):
            self.layers.append({
                "wqkv": _rand(((self.qh + 2 * self.kvh) * hd, h), device, dtype, gen),
                "wo": _rand((h, self.qh * hd), device, dtype, gen),
                "wgu": _rand((2 * inter, h), device, dtype, gen),
                "wd": _rand((h, inter), device, dtype, gen),
                "n1": torch.ones(h, device=device, dtype=dtype),
                "n2": torch.ones(h, device=device, dtype=dtype),
                "k": _rand((kv_elems,), device, dtype, gen) * 50,
                "v": _rand((kv_elems,), device, dtype, gen) * 50,
            })
        self.max_kv_tokens = max_kv_tokens
        self.gqa_native = self._probe_gqa()

    def _probe_gqa(self) -> bool:
        """Whether SDPA takes GQA with a bottom-right causal mask natively here (else KV is expanded)."""
        q = torch.zeros(1, self.qh, 2, self.hd, device=self.device, dtype=self.dtype)
        kv = torch.zeros(1, self.kvh, 3, self.hd, device=self.device, dtype=self.dtype)
        try:
            F.scaled_dot_product_attention(q, kv, kv, attn_mask=causal_lower_right(2, 3), enable_gqa=True)
        except (RuntimeError, TypeError, NotImplementedError):
            return False
        return True

    def attention_backend(self) -> str:
        """What attention ran: SDPA, its enabled CUDA kernels, and how GQA was handled."""
        gqa = "native GQA" if self.gqa_native else "KV expanded to query heads"
        if self.device.startswith("cuda"):
            kernels = [name for name, on in (("flash", torch.backends.cuda.flash_sdp_enabled()),
                                             ("mem_efficient", torch.backends.cuda.mem_efficient_sdp_enabled()),
                                             ("cudnn", torch.backends.cuda.cudnn_sdp_enabled()),
                                             ("math", torch.backends.cuda.math_sdp_enabled())) if on]
            return f"torch SDPA ({'/'.join(kernels)} enabled), {gqa}, bottom-right causal mask"
        return f"torch SDPA (CPU), {gqa}, bottom-right causal mask"

    def rope_tables(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary cos and sin of positions ``start .. start + length - 1``, shaped ``[1, length, 1, head_dim]``."""
        inv = 1.0 / ROPE_THETA ** (torch.arange(0, self.hd, 2, device=self.device, dtype=torch.float32) / self.hd)
        pos = torch.arange(start, start + length, device=self.device, dtype=torch.float32)
        ang = torch.outer(pos, inv).repeat(1, 2)
        return ang.cos().to(self.dtype)[None, :, None, :], ang.sin().to(self.dtype)[None, :, None, :]

    def step(self, point: Point) -> Callable[[], torch.Tensor]:
        """A closure running one forward of ``point`` (kind ``forward``) or the LM head alone (``lm_head``)."""
        gen = torch.Generator(device=self.device).manual_seed(point.num_tokens)
        if point.kind == "lm_head":
            x = _rand((point.num_tokens, self.h), self.device, self.dtype, gen)
            return lambda: self.logits(x)
        if point.kv_tokens > self.max_kv_tokens:
            raise ValueError(f"point {point.key} needs {point.kv_tokens} KV tokens > {self.max_kv_tokens}")
        b, q, ctx = point.batch, point.query_len, point.context
        ids = torch.randint(0, self.vocab, (b * q,), device=self.device, generator=gen)
        cos, sin = self.rope_tables(ctx, q)
        mask = causal_lower_right(q, ctx + q) if q > 1 else None
        caches = [(lay["k"][: b * self.kvh * (ctx + q) * self.hd].view(b, self.kvh, ctx + q, self.hd),
                   lay["v"][: b * self.kvh * (ctx + q) * self.hd].view(b, self.kvh, ctx + q, self.hd))
                  for lay in self.layers]

        def attention(i, qs, ks, vs):
            kc, vc = caches[i]
            qs = rotary(qs.view(b, q, self.qh, self.hd), cos, sin).transpose(1, 2)
            kc[:, :, ctx:] = rotary(ks.view(b, q, self.kvh, self.hd), cos, sin).transpose(1, 2)
            vc[:, :, ctx:] = vs.view(b, q, self.kvh, self.hd).transpose(1, 2)
            return self.sdpa(qs, kc, vc, mask).transpose(1, 2).reshape(b * q, self.qh * self.hd)

        def run() -> torch.Tensor:
            x = F.embedding(ids, self.embed)
            for i in range(len(self.layers)):
                x = self.layer(i, x, attention)
            if point.is_prefill:
                x = x.view(b, q, self.h)[:, -1]
            return self.logits(x)

        return run

    def layer(self, i: int, x: torch.Tensor, attention: AttentionFn) -> torch.Tensor:
        """Layer ``i`` on hidden states ``x`` ``[tokens, hidden]``: norm, QKV GEMM, ``attention``, O GEMM,
        residual, norm, gate/up GEMM, SiLU*mul, down GEMM, residual.

        ``attention(i, q, k, v)`` takes the flat projections (``[tokens, heads * head_dim]``) and returns
        ``[tokens, q_heads * head_dim]``; it applies the rotary embedding and writes the KV cache.
        """
        lay = self.layers[i]
        y = F.rms_norm(x, (self.h,), lay["n1"], EPS)
        qs, ks, vs = F.linear(y, lay["wqkv"]).split([self.qh * self.hd, self.kvh * self.hd, self.kvh * self.hd], -1)
        x = x + F.linear(attention(i, qs, ks, vs), lay["wo"])
        gate, up = F.linear(F.rms_norm(x, (self.h,), lay["n2"], EPS), lay["wgu"]).chunk(2, -1)
        return x + F.linear(F.silu(gate) * up, lay["wd"])

    def sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask) -> torch.Tensor:
        """SDPA of ``q`` ``[b, q_heads, n, d]`` over ``k``, ``v`` ``[b, kv_heads, m, d]`` (GQA native, or KV
        expanded where SDPA lacks it)."""
        if self.gqa_native:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        groups = self.qh // self.kvh
        return F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                              attn_mask=mask)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm, LM head and greedy argmax over hidden states ``x`` ``[n, hidden]``."""
        return F.linear(F.rms_norm(x, (self.h,), self.final_norm, EPS), self.lm_head).argmax(-1)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` (last dim head_dim) with ``cos``/``sin`` broadcastable to it."""
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat((-x2, x1), -1) * sin
