"""Synthetic traffic for sweeps without a trace: a copy process with tunable repetition.

A request's tokens (prompt, then output) are one realisation of a copy process over a vocabulary:
runs of fresh tokens (uniform over the vocabulary) alternate with copies of spans of the history
written so far. Before each copy come ``Geometric(copy_prob) - 1`` fresh tokens; a copy takes
``Geometric(1 / span_len)`` tokens (mean ``span_len``) starting at a uniformly chosen earlier
position (overlapping copies repeat periodically, as in LZ77). The expected share of copied tokens
is ``copy_prob * span_len / (copy_prob * span_len + 1 - copy_prob)``: none at ``copy_prob = 0``,
almost all as ``copy_prob -> 1``. Lengths come from lognormal models fitted to a bundled trace, or
are constant.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import numpy as np

from specplan import memory
from specplan.errors import ConfigError
from specplan.workloads.request import Request


@dataclass(frozen=True)
class CopyProcess:
    """The token process: ``copy_prob`` in [0, 1], mean copied span ``span_len`` >= 1."""

    copy_prob: float = 0.0
    span_len: float = 8.0
    vocab_size: int = 32000

    def __post_init__(self) -> None:
        if not 0.0 <= self.copy_prob <= 1.0:
            raise ConfigError(f"synthetic: copy_prob must lie in [0, 1], got {self.copy_prob}")
        if self.span_len < 1.0:
            raise ConfigError(f"synthetic: span_len must be at least 1, got {self.span_len}")
        if self.vocab_size < 2:
            raise ConfigError(f"synthetic: vocab_size must be at least 2, got {self.vocab_size}")

    @property
    def expected_copy_fraction(self) -> float:
        """Long-run share of tokens written by copies."""
        p, span = self.copy_prob, self.span_len
        return 0.0 if p == 0 else p * span / (p * span + 1.0 - p)

    def generate(self, length: int, rng: np.random.Generator) -> np.ndarray:
        """``length`` tokens of the process, starting from an empty history."""
        out = np.empty(length, dtype=np.int32)
        if self.copy_prob == 0.0:
            out[:] = rng.integers(0, self.vocab_size, size=length)
            return out
        cur = 0
        while cur < length:
            fresh = max(int(rng.geometric(self.copy_prob)) - 1, 1 if cur == 0 else 0)
            fresh = min(fresh, length - cur)
            out[cur : cur + fresh] = rng.integers(0, self.vocab_size, size=fresh)
            cur += fresh
            if cur >= length:
                break
            span = min(int(rng.geometric(1.0 / self.span_len)), length - cur)
            src = int(rng.integers(0, cur))
            out[cur : cur + span] = out[src + np.arange(span) % (cur - src)]
            cur += span
        return out


@dataclass(frozen=True)
class LengthModel:
    """Lengths ``round(exp(N(mu, sigma^2)))`` clipped to ``[1, max_len]``; ``sigma = 0`` is a constant."""

    mu: float
    sigma: float
    max_len: int

    @classmethod
    def constant(cls, length: int) -> "LengthModel":
        return cls(float(np.log(length)), 0.0, int(length))

    @classmethod
    def fit(cls, lengths: Sequence[int]) -> "LengthModel":
        """Maximum-likelihood lognormal fit (scipy, location fixed at 0); ``max_len`` is the largest seen."""
        from scipy import stats

        lengths = np.asarray(lengths, dtype=float)
        sigma, _, scale = stats.lognorm.fit(lengths, floc=0)
        return cls(float(np.log(scale)), float(sigma), int(lengths.max()))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        draws = rng.lognormal(self.mu, self.sigma, size=n) if self.sigma > 0 else np.full(n, np.exp(self.mu))
        return np.clip(np.rint(draws), 1, self.max_len).astype(np.int64)


def fit_lengths(requests: Sequence[Request]) -> tuple[LengthModel, LengthModel]:
    """Lognormal prompt and output length models fitted to a list of requests."""
    return (LengthModel.fit([r.prompt_len for r in requests]), LengthModel.fit([r.output_len for r in requests]))


def synthetic_lengths(n: int, prompt_lengths: LengthModel, output_lengths: LengthModel,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths of ``n`` synthetic requests: the first draws of the generator that
    ``synthetic_requests`` seeds (its tokens come after them)."""
    return prompt_lengths.sample(n, rng), output_lengths.sample(n, rng)


def synthetic_requests(n: int, process: CopyProcess, prompt_lengths: LengthModel, output_lengths: LengthModel,
                       seed: int | np.random.SeedSequence, tokens: bool = True,
                       made: Sequence[int] | None = None) -> list[Request]:
    """``n`` requests ``synthetic-{i}`` (category ``synthetic``), each prompt + output one realisation.

    With ``tokens`` False the token ids are not drawn and read as zeros: for a run that reads only
    the lengths (``specplan.run_reads.reads_tokens``), which are the same, since the tokens are
    the generator's last draws. ``made`` is the order the request objects are made in (a permutation
    of ``range(n)``; the list is in index order either way): a build that reads them in that order
    reads memory in order."""
    rng = np.random.default_rng(seed)
    plens, olens = synthetic_lengths(n, prompt_lengths, output_lengths, rng)
    lengths = plens + olens
    ends, sizes = np.cumsum(lengths).tolist(), lengths.tolist()
    if not tokens:
        zeros = np.zeros(int(lengths.max(initial=0)), dtype=np.int32)
        tokens_of = lambda i: zeros[:sizes[i]]
    elif process.copy_prob == 0.0:
        # Only fresh tokens: successive draws from one generator continue one stream (PCG64 keeps
        # the spare half of a 64-bit word between calls, and int32 and int64 draws below 2**32 take
        # the same 32-bit words), so one draw for all requests gives each request the tokens
        # ``generate`` would, without a numpy call per request.
        with memory.small_pages():  # written once here, read in order by the drafters
            block = rng.integers(0, process.vocab_size, size=int(lengths.sum()), dtype=np.int32)
        tokens_of = lambda i: block[ends[i] - sizes[i]:ends[i]]
    else:
        tokens_of = [process.generate(m, rng) for m in sizes].__getitem__  # drawn in index order
    plens, out = plens.tolist(), [None] * n
    for i in range(n) if made is None else made:
        tokens_i, p = tokens_of(i), plens[i]
        out[i] = Request(id=f"synthetic-{i}", prompt_ids=tokens_i[:p], output_ids=tokens_i[p:], category="synthetic")
    return out


@dataclass(frozen=True)
class SyntheticSpec:
    """``workload.trace: "synthetic:copy_prob=0.5,span_len=8,lengths=specbench"``: copy-process
    settings plus either a bundled trace to fit lengths to (``lengths``) or constant lengths."""

    copy_prob: float = 0.0
    span_len: float = 8.0
    vocab_size: int = 32000
    lengths: str | None = None
    prompt_len: int | None = None
    output_len: int | None = None

    @classmethod
    def parse(cls, spec: str | None) -> "SyntheticSpec":
        """``None`` or ``synthetic`` alone give the defaults; unknown keys are a ConfigError."""
        if spec is None or spec == "synthetic":
            return cls()
        head, _, body = spec.partition(":")
        if head != "synthetic":
            raise ConfigError(f"workload.trace: {spec!r} is not a synthetic spec (synthetic:key=value,...)")
        names = [f.name for f in fields(cls)]
        kwargs = {}
        for item in filter(None, body.split(",")):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or key not in names:
                raise ConfigError(f"workload.trace: bad synthetic setting {item!r}; keys: {', '.join(names)}")
            try:
                kwargs[key] = value.strip() if key == "lengths" else (float(value) if key in ("copy_prob", "span_len") else int(value))
            except ValueError:
                raise ConfigError(f"workload.trace: synthetic setting {key} has a bad value {value!r}") from None
        return cls(**kwargs)

    @property
    def process(self) -> CopyProcess:
        return CopyProcess(self.copy_prob, self.span_len, self.vocab_size)


def is_synthetic(trace: str | None) -> bool:
    """Whether ``workload.trace`` asks for synthetic traffic (``null`` or ``synthetic[:...]``)."""
    return trace is None or trace == "synthetic" or trace.startswith("synthetic:")
