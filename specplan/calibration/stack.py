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

Models read from their config.json keep their shapes: a mixture-of-experts model's MoE layers run the
router, top-k dispatch, grouped expert GEMMs and shared experts (``moe_block``; the dense-MLP layers
come first, as DeepSeek's ``first_k_dense_replace`` layers do); an MLA model's attention is latent
(``mla_block``); a windowed layer (sliding or chunked) attends to the keys its window leaves, the
last ``window + query_len - 1`` positions for a sliding window (the new positions share one
bottom-right causal mask over them: at most ``query_len - 1`` keys more than the band), those of the
current chunk for chunked attention. Weights are random in the stack's dtype whatever the checkpoint's
format (quantized GEMMs are not measured), and without the extras that do not change the shapes
(Gemma's extra norms, gpt-oss's biases and attention sinks). ``step(point, distinct=d)`` routes the
tokens to exactly ``d`` experts (the ``experts`` sweep); otherwise each token picks its experts uniformly.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from specplan.calibration.cpu_gemm import Gemm
from specplan.calibration.grid import Point
from specplan.calibration.mla_block import latent_width, mla_attention, mla_weights
from specplan.calibration.moe_block import Routing, forced_routing, moe_mlp, moe_weights, uniform_routing
from specplan.cost_models.models import ModelSpec

ROPE_THETA = 500000.0
EPS = 1e-5

AttentionFn = Callable[..., torch.Tensor]  # (i, q, k, v); in an MLA stack (i, y)


def _rand(shape, device, dtype, gen) -> torch.Tensor:
    return (torch.randn(shape, device=device, dtype=torch.float32, generator=gen) * 0.02).to(dtype)


def with_layers(model: ModelSpec, layers: int) -> ModelSpec:
    """``model`` cut (or grown) to ``layers`` layers, keeping its share of MoE and of windowed layers (at
    least one of each kind it has): what ``calibrate --layers`` measures."""
    def share(count: int) -> int:
        return 0 if not count else min(layers, max(1, round(layers * count / model.num_layers)))

    moe = dataclasses.replace(model.moe, num_moe_layers=share(model.moe.num_moe_layers)) if model.moe else None
    window = dataclasses.replace(model.window, num_layers=share(model.window.num_layers)) if model.window else None
    return dataclasses.replace(model, num_layers=layers, moe=moe, window=window)


class DecoderStack:
    """Random-weight decoder stack; ``step(point)`` returns a closure that runs one step on static inputs."""

    def __init__(self, model: ModelSpec, tp: int, device: str, dtype: torch.dtype, max_kv_tokens: int,
                 seed: int = 0, gemm: Gemm = F.linear) -> None:
        self.model, self.device, self.dtype = model, device, dtype
        self.linear = gemm  # every projection's GEMM (``cpu_gemm``: the CPU engine's own where installed)
        shard = model.shard(tp)
        self.qh, self.kvh, self.hd = shard.q_heads, shard.kv_heads, model.head_dim
        if model.mla is not None:
            self.kvh = 1  # the latent: one KV "head" shared by every query head
        self.h, self.vocab = model.hidden, shard.vocab
        gen = torch.Generator(device=device).manual_seed(seed)
        h, hd, inter = self.h, self.hd, shard.intermediate

        def rand(shape):
            return _rand(shape, device, dtype, gen)

        self.embed = rand((self.vocab, h))
        self.lm_head = rand((self.vocab, h))
        self.final_norm = torch.ones(h, device=device, dtype=dtype)
        self.layers = []
        kv_elems = max_kv_tokens * self.kvh * hd
        for i in range(model.num_layers):
            lay = {"n1": torch.ones(h, device=device, dtype=dtype), "n2": torch.ones(h, device=device, dtype=dtype)}
            if model.mla is not None:
                lay.update(mla_weights(model.mla, h, self.qh, max_kv_tokens * latent_width(model.mla), device,
                                       dtype, rand))
            else:
                lay.update(wqkv=rand(((self.qh + 2 * self.kvh) * hd, h)), wo=rand((h, self.qh * hd)),
                           k=rand((kv_elems,)) * 50, v=rand((kv_elems,)) * 50)
            if i < model.dense_layers:
                lay.update(wgu=rand((2 * inter, h)), wd=rand((h, inter)))
            else:
                lay.update(moe_weights(model.moe, h, tp, device, dtype, rand))
            self.layers.append(lay)
        self.windowed = set(range(model.window.num_layers)) if model.window else set()
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

    def rope_tables(self, start: int, length: int, dim: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary cos and sin of positions ``start .. start + length - 1``, shaped ``[1, length, 1, dim]``
        (``dim`` the head dim by default; MLA rotates its ``qk_rope_head_dim`` part)."""
        dim = dim or self.hd
        inv = 1.0 / ROPE_THETA ** (torch.arange(0, dim, 2, device=self.device, dtype=torch.float32) / dim)
        pos = torch.arange(start, start + length, device=self.device, dtype=torch.float32)
        ang = torch.outer(pos, inv).repeat(1, 2)
        return ang.cos().to(self.dtype)[None, :, None, :], ang.sin().to(self.dtype)[None, :, None, :]

    def routing(self, tokens: int, gen: torch.Generator, distinct: Optional[int] = None) -> list[Optional[Routing]]:
        """Each layer's routing of ``tokens`` tokens (None for a dense-MLP layer): uniform top-k, or exactly
        ``distinct`` experts touched."""
        moe = self.model.moe
        if moe is None:
            return [None] * len(self.layers)
        return [None if "router" not in lay else
                uniform_routing(tokens, moe, gen, self.device) if distinct is None else
                forced_routing(tokens, moe, distinct, gen, self.device) for lay in self.layers]

    def _window_start(self, ctx: int, q: int) -> int:
        """First cached position a windowed layer's new positions read (module docstring)."""
        w = self.model.window
        return (ctx // w.size) * w.size if w.kind == "chunked" else max(0, ctx + 1 - w.size)

    def step(self, point: Point, distinct: Optional[int] = None) -> Callable[[], torch.Tensor]:
        """A closure running one forward of ``point`` (kind ``forward``) or the LM head alone (``lm_head``);
        ``distinct``: the MoE layers' tokens go to exactly that many experts."""
        gen = torch.Generator(device=self.device).manual_seed(point.num_tokens)
        if point.kind == "lm_head":
            x = _rand((point.num_tokens, self.h), self.device, self.dtype, gen)
            return lambda: self.logits(x)
        if point.kv_tokens > self.max_kv_tokens:
            raise ValueError(f"point {point.key} needs {point.kv_tokens} KV tokens > {self.max_kv_tokens}")
        b, q, ctx = point.batch, point.query_len, point.context
        ids = torch.randint(0, self.vocab, (b * q,), device=self.device, generator=gen)
        routing = self.routing(b * q, gen, distinct)
        mla = self.model.mla
        if mla is not None:
            cos, sin = self.rope_tables(ctx, q, mla.qk_rope_head_dim)

            def attention(i, y):
                return mla_attention(self.layers[i], mla, y, b, q, ctx, lambda x: rotary(x, cos, sin), self.sdpa,
                                     self.linear)
        else:
            attention = self._attention(b, q, ctx)

        def run() -> torch.Tensor:
            x = F.embedding(ids, self.embed)
            for i in range(len(self.layers)):
                x = self.layer(i, x, attention, routing[i])
            if point.is_prefill:
                x = x.view(b, q, self.h)[:, -1]
            return self.logits(x)

        return run

    def _attention(self, b: int, q: int, ctx: int) -> AttentionFn:
        """The GQA attention of a step of ``b`` rows of ``q`` positions over ``ctx`` cached tokens each."""
        cos, sin = self.rope_tables(ctx, q)
        start = self._window_start(ctx, q) if self.windowed else 0
        masks = {s: causal_lower_right(q, ctx + q - s) if q > 1 else None for s in {0, start}}
        caches = [(lay["k"][: b * self.kvh * (ctx + q) * self.hd].view(b, self.kvh, ctx + q, self.hd),
                   lay["v"][: b * self.kvh * (ctx + q) * self.hd].view(b, self.kvh, ctx + q, self.hd))
                  for lay in self.layers]

        def attention(i, qs, ks, vs):
            kc, vc = caches[i]
            qs = rotary(qs.view(b, q, self.qh, self.hd), cos, sin).transpose(1, 2)
            kc[:, :, ctx:] = rotary(ks.view(b, q, self.kvh, self.hd), cos, sin).transpose(1, 2)
            vc[:, :, ctx:] = vs.view(b, q, self.kvh, self.hd).transpose(1, 2)
            s = start if i in self.windowed else 0
            return self.sdpa(qs, kc[:, :, s:], vc[:, :, s:], masks[s]).transpose(1, 2).reshape(b * q, self.qh * self.hd)

        return attention

    def layer(self, i: int, x: torch.Tensor, attention: AttentionFn, routing: Optional[Routing] = None) -> torch.Tensor:
        """Layer ``i`` on hidden states ``x`` ``[tokens, hidden]``: norm, QKV GEMM, ``attention``, O GEMM,
        residual, norm, gate/up GEMM, SiLU*mul, down GEMM (or the MoE MLP), residual.

        ``attention(i, q, k, v)`` takes the flat projections (``[tokens, heads * head_dim]``) and returns
        ``[tokens, q_heads * head_dim]``; it applies the rotary embedding and writes the KV cache. In an
        MLA stack it is ``attention(i, y)`` on the normed states, returning the output projection
        (``mla_block``). ``routing``: an MoE layer's planned dispatch (None: its router's own top-k).
        """
        lay = self.layers[i]
        y = F.rms_norm(x, (self.h,), lay["n1"], EPS)
        if "latent" in lay:
            x = x + attention(i, y)
        else:
            qs, ks, vs = self.linear(y, lay["wqkv"]).split([self.qh * self.hd, self.kvh * self.hd, self.kvh * self.hd], -1)
            x = x + self.linear(attention(i, qs, ks, vs), lay["wo"])
        y = F.rms_norm(x, (self.h,), lay["n2"], EPS)
        if "router" in lay:
            return x + moe_mlp(lay, y, self.model.moe.top_k, routing, self.linear)
        gate, up = self.linear(y, lay["wgu"]).chunk(2, -1)
        return x + self.linear(F.silu(gate) * up, lay["wd"])

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
        return self.linear(F.rms_norm(x, (self.h,), self.final_norm, EPS), self.lm_head).argmax(-1)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` (last dim head_dim) with ``cos``/``sin`` broadcastable to it."""
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat((-x2, x1), -1) * sin
