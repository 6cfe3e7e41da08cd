"""The calibration grid: 1-D sweeps around a base point (COSTS.md §4), as uniform-row step shapes.

Each point is a step of ``batch`` identical rows, each computing ``query_len`` positions over
``context`` resident tokens (prefill rows marked). Sweeps, around the base point (B0 rows of one
token over ctx0):

- ``tokens``: total tokens N. Up to ``max_decode_rows`` it is N generation rows of one token over a
  short context; above, one prefill chunk of N tokens at context 0. Its values are the knots of the
  token-level curve, so it always reaches the largest N of any other sweep;
- ``batch``: B rows of one token at ctx0;
- ``draft_len``: B0 rows of 1+K tokens at ctx0, K in ``draft_lens``; ``draft_len_large``: the same at a
  larger batch, where gamma is large;
- ``context`` and ``verify_context``: B0 rows of 1 and of 1+``verify_k`` tokens over each context;
- ``chunk``: one prefill chunk of each size at context 0; ``chunk_context``: one chunk of
  ``chunk_sizes[1]`` tokens over each context;
- ``lm_head``: the LM head alone at each logit count (``kind="lm_head"``).

``cover`` extends a grid to the prefill sizes and contexts a scenario will use (``calibrate --max-tokens
--max-context``); ``require_coverage`` refuses a profile measured too far short of a run's steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from specplan.cost_models.profile import MeasuredRange


@dataclass(frozen=True)
class Point:
    """One measured step shape."""

    sweep: str
    batch: int
    query_len: int
    context: int
    is_prefill: bool = False
    kind: str = "forward"

    @property
    def num_tokens(self) -> int:
        return self.batch * self.query_len

    @property
    def logit_tokens(self) -> int:
        return self.batch if self.is_prefill else self.num_tokens

    @property
    def kv_tokens(self) -> int:
        """KV positions the step's cache must hold."""
        return self.batch * (self.context + self.query_len) if self.kind == "forward" else 0

    @property
    def key(self) -> str:
        tag = "p" if self.is_prefill else "d"
        return f"{self.kind[0]}-B{self.batch}-q{self.query_len}-c{self.context}-{tag}"


@dataclass(frozen=True)
class GridSpec:
    """The sweep values for one device class."""

    base_batch: int
    base_context: int
    token_context: int
    max_decode_rows: int
    token_counts: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    draft_lens: tuple[int, ...]
    large_batch: int
    large_draft_lens: tuple[int, ...]
    contexts: tuple[int, ...]
    verify_k: int
    chunk_sizes: tuple[int, ...]
    chunk_contexts: tuple[int, ...]

    def as_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


# H100/H200-class GPU: N 1..512 densely then geometric to 8192 (COSTS.md §4, thinned to fit the budget).
CUDA_GRID = GridSpec(
    base_batch=32, base_context=1024, token_context=128, max_decode_rows=512,
    token_counts=(1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512,
                  640, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192),
    batch_sizes=(1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256),
    draft_lens=(0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16),
    large_batch=128, large_draft_lens=(1, 2, 4, 8),
    contexts=(128, 512, 2048, 4096, 8192, 16384, 32768),
    verify_k=4,
    chunk_sizes=(256, 512, 1024, 2048, 4096),
    chunk_contexts=(1024, 4096, 16384),
)

# The ``tiny`` model on a CPU: a grid that a ~20 s budget covers three times.
CPU_GRID = GridSpec(
    base_batch=8, base_context=64, token_context=16, max_decode_rows=64,
    token_counts=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256),
    batch_sizes=(1, 2, 4, 8, 16, 32, 64),
    draft_lens=(0, 1, 2, 3, 4, 5, 6, 7, 8),
    large_batch=32, large_draft_lens=(1, 2, 4, 8),
    contexts=(16, 64, 256, 1024),
    verify_k=4,
    chunk_sizes=(32, 64, 128, 256),
    chunk_contexts=(64, 256, 1024),
)


def build_points(spec: GridSpec) -> list[Point]:
    """Every point of every sweep, deduplicated: a shape shared by two sweeps is measured once, under
    the first (``tokens`` comes first, so every token count stays a knot)."""
    b0, c0 = spec.base_batch, spec.base_context
    pts: list[Point] = []
    pts += [Point("batch", b, 1, c0) for b in spec.batch_sizes]
    pts += [Point("draft_len", b0, 1 + k, c0) for k in spec.draft_lens]
    pts += [Point("draft_len_large", spec.large_batch, 1 + k, c0) for k in spec.large_draft_lens]
    pts += [Point("context", b0, 1, c) for c in spec.contexts]
    pts += [Point("verify_context", b0, 1 + spec.verify_k, c) for c in spec.contexts]
    pts += [Point("chunk", 1, q, 0, True) for q in spec.chunk_sizes]
    pts += [Point("chunk_context", 1, spec.chunk_sizes[1], c, True) for c in spec.chunk_contexts]
    n_max = max([p.num_tokens for p in pts] + list(spec.token_counts))
    token_counts = sorted(set(spec.token_counts) | {n_max})
    pts = [
        Point("tokens", n, 1, spec.token_context) if n <= spec.max_decode_rows else Point("tokens", 1, n, 0, True)
        for n in token_counts
    ] + pts
    logit_max = max(p.logit_tokens for p in pts)
    pts += [Point("lm_head", n, 1, 0, kind="lm_head") for n in sorted(set(token_counts) | {logit_max})]
    seen: set[str] = set()
    unique = []
    for p in pts:
        if p.key not in seen:
            seen.add(p.key)
            unique.append(p)
    return unique


# A profile prices steps up to this factor past what its grid measured; further is refused in one line.
EXTRAPOLATION_LIMIT = 4.0


def cover(spec: GridSpec, max_tokens: Optional[int] = None, max_context: Optional[int] = None) -> GridSpec:
    """``spec`` extended to the steps a scenario will run: token counts (as prefill chunks) and chunk sizes
    doubling up to ``max_tokens``, contexts doubling up to ``max_context`` (each ending at the value)."""
    def doubling(values: tuple[int, ...], top: Optional[int]) -> tuple[int, ...]:
        if top is None or top <= max(values):
            return values
        extra, v = [], max(values) * 2
        while v < top:
            extra.append(v)
            v *= 2
        return values + tuple(extra) + (top,)

    return replace(spec, token_counts=doubling(spec.token_counts, max_tokens),
                   chunk_sizes=doubling(spec.chunk_sizes, max_tokens),
                   contexts=doubling(spec.contexts, max_context),
                   chunk_contexts=doubling(spec.chunk_contexts, max_context))


def require_coverage(measured: "MeasuredRange", tokens: int, context: int, source: str) -> None:
    """Refuse, in one line, a profile whose grid stops more than ``EXTRAPOLATION_LIMIT`` times short of the
    largest step (``tokens``) or context a run will reach; within it, the profile extrapolates."""
    from specplan.errors import ConfigError

    for what, need, top, option in (("tokens a step", tokens, measured.tokens[1], "--max-tokens"),
                                    ("context", context, measured.max_context, "--max-context")):
        if need > EXTRAPOLATION_LIMIT * max(top, 1):
            raise ConfigError(f"{source}: measured up to {top} {what}, the run reaches {need} ({need / max(top, 1):.0f}x; "
                              f"at most {EXTRAPOLATION_LIMIT:g}x is extrapolated): calibrate with {option} {need}, or "
                              f"from the engine's own steps (specplan calibrate --from-logs engine_steps.csv)")
