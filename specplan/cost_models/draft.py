"""Drafting cost on a step's critical path: the host NGram pool and the GPU suffix-automaton kernel.

- **Host pools** (``NGram``, ``AUTO``, ``pld``, ``suffix``, ``vllm_ngram``): the Python pool runs
  serially over the generation requests before the forward, so a step pays ``num_requests`` times
  the per-request time ``t(pool_entries, K)``: one pool update with the newly committed tokens plus
  one longest-key lookup. The table is measured by ``specplan calibrate`` on the calibrating host
  (``calibration.draft_bench``); the bundled ``data/profiles/draft_costs.yaml`` was measured on the
  development CPU and says so. It is interpolated linearly in ``log10(pool_entries)`` and in ``K``,
  and held flat outside the measured range. ``pld`` and ``suffix`` have no measurement of their own
  and are priced as the Python pool (an upper bound for suffix's C++ tree); ``vllm_ngram`` is Numba-
  compiled, 25x faster (vLLM PR #13365 reports 20-30x).
- **SA** (TensorRT-LLM's GPU suffix automaton): kernels inside the forward, latency-bound chains of
  dependent loads, so microseconds, flat in the batch up to one request per SM, then one more wave
  per SM-count of requests (COSTS.md §4). ``t = base_s * ceil(B / SMs) * (1 + size_doubling_factor *
  log2(size / reference_size))`` for automata larger than ``reference_size``. The defaults
  (10 us, 5% per doubling above 1K tokens) are an estimate awaiting a GPU measurement.

``pool_entries`` is the number of pattern keys in the NGram pool, or the automaton size (tokens)
for SA.
"""

from __future__ import annotations

import functools
import math
from importlib import resources
from pathlib import Path
from typing import Optional

import numpy as np
import yaml
from pydantic import Field, ValidationError, model_validator

from specplan.config import StrictModel, format_validation_error
from specplan.config_rules import NEURAL_DRAFTERS
from specplan.errors import ConfigError, read_failure

HOST_SPEEDUP = {"NGram": 1.0, "AUTO": 1.0, "pld": 1.0, "suffix": 1.0, "vllm_ngram": 25.0}
GPU_DRAFTERS = ("SA",)
DRAFT_COSTS_FORMAT = "specplan-draft-costs/1"


_Strict = StrictModel

class NGramHostTable(_Strict):
    """Measured seconds per request-step of the host pool, by pool size (rows) and K (columns)."""

    pool_entries: list[int] = Field(min_length=1)
    draft_len: list[int] = Field(min_length=1)
    seconds_per_request: list[list[float]]

    @model_validator(mode="after")
    def _shape(self) -> "NGramHostTable":
        if any(b <= a for a, b in zip(self.pool_entries, self.pool_entries[1:])) or min(self.pool_entries) < 1:
            raise ValueError("pool_entries must be increasing positive integers")
        if any(b <= a for a, b in zip(self.draft_len, self.draft_len[1:])) or min(self.draft_len) < 1:
            raise ValueError("draft_len must be increasing positive integers")
        rows = self.seconds_per_request
        if len(rows) != len(self.pool_entries) or any(len(r) != len(self.draft_len) for r in rows):
            raise ValueError("seconds_per_request must have one row per pool_entries value, one column per draft_len")
        if any(v < 0 for r in rows for v in r):
            raise ValueError("seconds_per_request must be >= 0")
        return self


class SAKernelCost(_Strict):
    """GPU suffix-automaton kernel cost per step; see the module docstring for the form.

    ``batch`` / ``seconds``, when measured (``specplan calibrate`` on a GPU times the project's
    Triton kernel at ``reference_size`` tokens of history), replace ``base_s * waves`` by linear
    interpolation over the batch size.
    """

    base_s: float = Field(10e-6, ge=0)
    size_doubling_factor: float = Field(0.05, ge=0)
    reference_size: int = Field(1024, ge=1)
    measured: bool = False
    batch: Optional[list[int]] = None
    seconds: Optional[list[float]] = None

    @model_validator(mode="after")
    def _table(self) -> "SAKernelCost":
        if (self.batch is None) != (self.seconds is None):
            raise ValueError("batch and seconds must be given together")
        if self.batch is not None and (len(self.batch) != len(self.seconds) or not self.batch
                                       or any(b <= a for a, b in zip(self.batch, self.batch[1:]))):
            raise ValueError("batch must be increasing, with one seconds value each")
        return self


class NeuralDraftCost(_Strict):
    """A model-based draft loop (MTP, Eagle3): one small forward per drafted position.

    The default (0.2 ms per position, about one decoder layer plus the LM head of an 8B model on an
    H100/H200 at small batch) is an estimate; give a measured value in the profile's draft section.
    """

    seconds_per_draft_token: float = Field(2e-4, ge=0)


class DraftCostSection(_Strict):
    """The ``draft`` section of a profile, or the body of a draft-costs file."""

    ngram_host: NGramHostTable
    sa_kernel: SAKernelCost = SAKernelCost()
    neural: NeuralDraftCost = NeuralDraftCost()
    provenance: dict[str, str] = Field(default_factory=dict)


class DraftCostFile(DraftCostSection):
    format: str

    @model_validator(mode="after")
    def _format(self) -> "DraftCostFile":
        if self.format != DRAFT_COSTS_FORMAT:
            raise ValueError(f"expected {DRAFT_COSTS_FORMAT!r}")
        return self


@functools.lru_cache(maxsize=16)
def _read_draft_costs(path: Optional[str]) -> DraftCostFile:
    """Parse a draft-costs file (the bundled one when ``path`` is None), once per path."""
    if path is None:
        text = resources.files("specplan").joinpath("data", "profiles", "draft_costs.yaml").read_text()
        source = "bundled draft_costs.yaml"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read draft costs ({read_failure(exc)})") from None
        source = str(path)
    try:
        return DraftCostFile.model_validate(yaml.safe_load(text))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from None
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


class DraftCost:
    """Prices ``CostModel.draft_time`` from a ``DraftCostSection`` and the GPU's SM count."""

    def __init__(self, section: DraftCostSection, sm_count: int) -> None:
        self.section, self.sm_count = section, sm_count
        t = section.ngram_host
        self._log_pool = np.log10(np.asarray(t.pool_entries, dtype=float))
        self._k = np.asarray(t.draft_len, dtype=float)
        self._table = np.asarray(t.seconds_per_request, dtype=float)

    @classmethod
    def load(cls, path: Optional[str], sm_count: int) -> "DraftCost":
        """From a draft-costs file, or the bundled one when ``path`` is None."""
        return cls(_read_draft_costs(path), sm_count)

    @classmethod
    def default(cls, sm_count: int) -> "DraftCost":
        """The bundled host table with the default SA kernel estimate."""
        return cls.load(None, sm_count)

    def host_per_request_s(self, pool_entries: int, k: int) -> float:
        """Seconds of one request's pool update and lookup (Python pool), bilinear and clamped."""
        x = math.log10(max(pool_entries, 1))
        per_k = [float(np.interp(x, self._log_pool, col)) for col in self._table.T]
        return float(np.interp(k, self._k, per_k))

    def sa_kernel_s(self, num_requests: int, automaton_size: int) -> float:
        """Seconds of the SA extend+lookup kernels for ``num_requests`` rows."""
        sa = self.section.sa_kernel
        if sa.batch is not None:
            base = float(np.interp(num_requests, sa.batch, sa.seconds))
        else:
            base = sa.base_s * math.ceil(num_requests / self.sm_count)
        growth = 1.0 + sa.size_doubling_factor * max(0.0, math.log2(max(automaton_size, 1) / sa.reference_size))
        return base * growth

    def time(self, drafter: str, num_requests: int, k: int, pool_entries: int = 0) -> float:
        """Critical-path drafting seconds of one step; 0 when nothing drafts or ``drafter`` is ``none``."""
        if drafter == "none" or num_requests <= 0 or k <= 0:
            return 0.0
        if drafter in GPU_DRAFTERS:
            return self.sa_kernel_s(num_requests, pool_entries)
        if drafter in NEURAL_DRAFTERS:
            return k * self.section.neural.seconds_per_draft_token
        if drafter not in HOST_SPEEDUP:
            raise ConfigError(
                f"speculation.decoding_type: no drafting cost for {drafter!r} "
                f"(known: {', '.join([*HOST_SPEEDUP, *GPU_DRAFTERS, *NEURAL_DRAFTERS, 'none'])})"
            )
        return num_requests * self.host_per_request_s(pool_entries, k) / HOST_SPEEDUP[drafter]
