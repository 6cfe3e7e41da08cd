"""Step-time profiles: the file format, loading and writing, and the calibrated (``profile``) model.

A profile file (YAML, ``format: specplan-profile/1``) is either

- **measured** (``provenance.kind: measured``), written by ``specplan calibrate``: the step time is

      T = g(N) + h(N_logits) + a_kv * sum(ctx + q) + a_dec * W_decode + a_pre * W_prefill
          + TP communication + host overhead

  with ``g`` piecewise linear over the measured total-token grid (token-level work: GEMMs, norms,
  activations, embedding), ``h`` piecewise linear over the measured LM-head grid, and attention
  linear in the KV tokens touched and in the score work ``W = sum q * (ctx + (q + 1) / 2)`` of
  generation rows and of prefill rows (``terms`` module). Continuous everywhere; outside the measured
  range ``g`` and ``h`` extend their end segments, never downhill (a falling end segment, measurement
  noise, is extended flat, so no extrapolation goes below the nearest measured time), and the model
  warns once per dimension, naming the range. TP communication is analytic (a calibrate run measures one GPU's shard).
  The host overhead is ``cost.host_overhead_s`` + ``host_overhead_per_seq_s`` B unless the profile
  measured its own (``host``: per step, per sequence and, for a host drafter, per drafting step and row;
  ``specplan calibrate --from-logs engine_steps.csv`` fits them to an engine's steps), and a profile
  measured eagerly says ``cuda_graph_padding: false``;
- **analytic** (``provenance.kind: analytic``): a named roofline, ``gpu``, ``model``, ``tp`` and ``dtype``;
  ``registry.cost_model_from_profile`` builds a ``RooflineCostModel`` from it.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import yaml
from pydantic import Field, ValidationError, model_validator

from specplan.config import StrictModel, format_validation_error
from specplan.cost_models.draft import HOST_SPEEDUP, DraftCost, DraftCostSection
from specplan.config import CostConfig
from specplan.cost_models.profile_step import OUTSIDE, params_of, priced_tokens, profile_step_time, segment
from specplan.cost_models.terms import BatchTerms, TermsCostModel
from specplan.atomic import atomic_write_text
from specplan.errors import ConfigError, read_failure
from specplan.strict_yaml import strict_load

PROFILE_FORMAT = "specplan-profile/1"


_Strict = StrictModel

class Curve(_Strict):
    """Seconds at increasing token counts; piecewise linear between them."""

    tokens: list[int] = Field(min_length=2)
    seconds: list[float] = Field(min_length=2)

    @model_validator(mode="after")
    def _check(self) -> "Curve":
        if len(self.tokens) != len(self.seconds):
            raise ValueError("tokens and seconds must have the same length")
        if self.tokens[0] < 1 or any(b <= a for a, b in zip(self.tokens, self.tokens[1:])):
            raise ValueError("tokens must be increasing positive integers")
        if any(not math.isfinite(s) or s < 0 for s in self.seconds):
            raise ValueError("seconds must be finite and >= 0")
        if not any(s > 0 for s in self.seconds):
            raise ValueError("seconds must not all be 0 (a step takes time)")
        return self


class AttentionTerms(_Strict):
    """Attention seconds per KV token touched and per unit of score work (whole model, one GPU)."""

    kv_s_per_token: float = Field(ge=0, allow_inf_nan=False)
    decode_work_s: float = Field(ge=0, allow_inf_nan=False)
    prefill_work_s: float = Field(ge=0, allow_inf_nan=False)


class MeasuredRange(_Strict):
    """What the calibration grid covered; predictions outside it warn."""

    tokens: tuple[int, int]
    logit_tokens: tuple[int, int]
    max_context: int = Field(ge=0)
    max_batch: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> "MeasuredRange":
        for name in ("tokens", "logit_tokens"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise ValueError(f"{name}: expected [low, high] with 1 <= low <= high, got [{lo}, {hi}]")
        return self


class HostTerms(_Strict):
    """Host time per step measured with the profile (scheduler, sampler, drafter), each its own term.

    When a profile has it, it replaces ``cost.host_overhead_s`` / ``host_overhead_per_seq_s``, and a host
    drafter (n-gram pools) costs ``draft_step_s + draft_per_seq_s * drafting rows`` instead of the draft table.
    """

    step_s: float = Field(ge=0, allow_inf_nan=False)
    per_seq_s: float = Field(0.0, ge=0, allow_inf_nan=False)
    draft_step_s: Optional[float] = Field(None, ge=0, allow_inf_nan=False)
    draft_per_seq_s: Optional[float] = Field(None, ge=0, allow_inf_nan=False)


class ModelShape(_Strict):
    """The shapes TP communication needs."""

    name: str
    num_layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    vocab: int = Field(ge=1)


class Provenance(_Strict):
    kind: Literal["measured", "analytic"]
    source: str
    device: Optional[str] = None
    date: Optional[str] = None
    heldout_median_abs_error: Optional[float] = Field(None, ge=0, allow_inf_nan=False)
    heldout_points: Optional[int] = Field(None, ge=0)
    notes: Optional[str] = None


class ProfileFile(_Strict):
    """One profile file; see the module docstring."""

    format: str
    name: str
    provenance: Provenance
    gpu: Optional[str] = Field(None, description="catalogue key: the roofline's GPU, SA drafting's SM count, TP links")
    model: Optional[str] = Field(None, description="analytic: catalogue model name or config.json path")
    tp: int = Field(1, ge=1)
    dtype: Literal["bf16", "fp8", "fp32"] = "bf16"
    model_shape: Optional[ModelShape] = None
    token_time: Optional[Curve] = None
    lm_head_time: Optional[Curve] = None
    attention: Optional[AttentionTerms] = None
    measured_range: Optional[MeasuredRange] = None
    eager_overhead_s: Optional[float] = Field(None, allow_inf_nan=False, description="median eager minus graph time (informational)")
    draft: Optional[DraftCostSection] = None
    host: Optional[HostTerms] = None
    cuda_graph_padding: Optional[bool] = Field(None, description="false: measured eagerly (no padding); "
                                                                 "None: cost.cuda_graph_padding decides")

    @model_validator(mode="after")
    def _complete(self) -> "ProfileFile":
        if self.format != PROFILE_FORMAT:
            raise ValueError(f"format must be {PROFILE_FORMAT!r}")
        if self.provenance.kind == "analytic":
            if self.gpu is None or self.model is None:
                raise ValueError("an analytic profile needs 'gpu' and 'model'")
            if self.dtype == "fp32":
                raise ValueError("an analytic profile's dtype is bf16 or fp8")
            return self
        for section in ("model_shape", "token_time", "lm_head_time", "attention", "measured_range"):
            if getattr(self, section) is None:
                raise ValueError(f"a measured profile needs a '{section}' section")
        return self


def parse_profile(text: str, source: str) -> ProfileFile:
    """Validate profile YAML text; one-line ``ConfigError`` naming ``source`` and the field."""
    try:
        data = strict_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of profile fields")
    try:
        return ProfileFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def read_profile(path: str | Path) -> ProfileFile:
    """Load and validate a profile file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read profile ({read_failure(exc)})") from None
    return parse_profile(text, str(path))


def write_profile(profile: ProfileFile, path: str | Path) -> None:
    """Write ``profile`` as YAML, atomically."""
    data = profile.model_dump(mode="json", exclude_none=True)
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120))


class Segments:
    """Piecewise-linear curve through the knots; past either end, the end segment extended with its slope
    clamped at >= 0 and the value floored at 0, so extrapolation never predicts a negative or shrinking
    time from a noisy end segment (``profile_step.segment``)."""

    def __init__(self, curve: Curve) -> None:
        self.x = np.array(curve.tokens, dtype=np.float64)
        self.y = np.array(curve.seconds, dtype=np.float64)

    def __call__(self, n: float) -> float:
        return segment(self.x, self.y, float(n))


class ProfileCostModel(TermsCostModel):
    """The calibrated model: interpolates a measured profile (see the module docstring)."""

    name = "profile"

    def __init__(self, profile: ProfileFile, draft: DraftCost, options: CostConfig = CostConfig(),
                 source: str = "", allreduce: Optional[tuple[float, float]] = None) -> None:
        if profile.provenance.kind != "measured":
            raise ConfigError(f"{source or profile.name}: ProfileCostModel needs a measured profile")
        self.profile, self.options, self.source = profile, options, source or profile.name
        self._g = Segments(profile.token_time)
        self._h = Segments(profile.lm_head_time)
        self._warned: set[str] = set()
        if profile.tp > 1 and allreduce is None:
            raise ConfigError(f"{self.source}: tp {profile.tp} needs all-reduce parameters (a catalogued gpu)")
        self.params = self._params(allreduce or (0.0, 1.0))  # (links unused at TP 1)
        self.outside = np.full((2, len(OUTSIDE)), np.nan)  # what compiled spans noted (``warn_outside``)
        self.draft = draft

    def _params(self, allreduce: tuple[float, float]) -> np.ndarray:
        # ``profile_step.params_of``: what the compiled step time reads, in its positions.
        p, o, r, a = self.profile, self.options, self.profile.measured_range, self.profile.attention
        pad = o.cuda_graph_padding if p.cuda_graph_padding is None else p.cuda_graph_padding
        host = (o.host_overhead_s, o.host_overhead_per_seq_s) if p.host is None else (p.host.step_s, p.host.per_seq_s)
        shape = p.model_shape
        settings = [float(pad), o.cuda_graph_max_tokens, a.kv_s_per_token, a.decode_work_s, a.prefill_work_s,
                    shape.num_layers, shape.hidden, shape.vocab, p.tp, *allreduce, *host, *r.tokens,
                    *r.logit_tokens, r.max_context, 0, 0]
        return params_of(settings, self._g.x, self._g.y, self._h.x, self._h.y)

    def _warn_outside(self, what: str, value: float, lo: float, hi: float) -> None:
        if what not in self._warned and not lo <= value <= hi:
            self._warned.add(what)
            warnings.warn(
                f"profile {self.source}: {what} {value:g} is outside the measured range [{lo:g}, {hi:g}]; extrapolating",
                stacklevel=3,
            )

    def step_time_terms(self, t: BatchTerms) -> float:
        """Seconds for one forward, host overhead included (0 for an empty batch)."""
        if t.num_seqs == 0:
            return 0.0
        self.warn_outside()  # what spans noted before this step, first
        p = self.params
        for what, value, bounds in zip(OUTSIDE, (priced_tokens(p, t.num_tokens), t.logit_tokens, t.max_context),
                                       self._bounds()):
            self._warn_outside(what, value, *bounds)
        return profile_step_time(p, t.num_seqs, t.num_tokens, t.logit_tokens, t.kv_decode, t.kv_prefill,
                                 t.work_decode, t.work_prefill)

    def _bounds(self) -> tuple:
        # The measured range of each ``OUTSIDE`` check.
        r = self.profile.measured_range
        return r.tokens, r.logit_tokens, (0, r.max_context)

    def warn_outside(self) -> None:
        """The range warnings of what compiled spans priced (``profile_step.note_outside`` into
        ``outside``), in the order their steps met them, as ``step_time_terms`` gives them; clears it.
        The spans call it when they return, and every step priced in Python first."""
        noted = self.outside
        if np.isnan(noted[0]).all():
            return
        for j in sorted(np.flatnonzero(~np.isnan(noted[0])).tolist(), key=lambda j: noted[1, j]):
            self._warn_outside(OUTSIDE[j], int(noted[0, j]), *self._bounds()[j])
        noted[:] = np.nan

    def draft_time(self, drafter: str, num_requests: int, k: int, pool_entries: int = 0) -> float:
        """Drafting seconds: a host drafter from the profile's measured ``host`` terms when it has them,
        else the profile's ``draft`` section or the bundled costs (``DraftCost``)."""
        terms = self.host_draft_terms(drafter)
        if terms is not None and num_requests > 0 and k > 0:
            return terms[0] + terms[1] * num_requests
        return self.draft.time(drafter, num_requests, k, pool_entries)

    def host_draft_terms(self, drafter: str) -> Optional[tuple[float, float]]:
        """``(draft_step_s, draft_per_seq_s)`` where the profile's measured host terms price
        ``drafter``'s drafting (a host drafter), else None."""
        h = self.profile.host
        if h is None or h.draft_step_s is None or drafter not in HOST_SPEEDUP:
            return None
        return h.draft_step_s, h.draft_per_seq_s or 0.0

    def describe(self) -> str:
        p = self.profile.provenance
        err = f", held-out median error {p.heldout_median_abs_error:.1%}" if p.heldout_median_abs_error is not None else ""
        return f"profile {self.profile.name} ({self.source}): measured on {p.device or 'unknown device'} {p.date or ''}{err}"
