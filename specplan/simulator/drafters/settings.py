"""Drafter settings, spelled as the engines' own fields, with each engine's defaults and rules.

``DrafterSettings`` is what the drafters read. ``from_spec`` builds it from the simulator's
``SpeculationConfig``; the ``specplan acceptance`` command builds it from its flags. A field left
unset (None) takes the default of the engine the drafter comes from, which differs by drafter for
``max_matching_ngram_size`` (TRT NGram 2, TRT SA -1, reference PLD 3, HF PLD 2).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Optional

from specplan.errors import ConfigError

KINDS = ("ngram", "sa", "vllm_ngram", "suffix", "pld")

# SpeculationConfig.decoding_type -> drafter kind. AUTO is TensorRT-LLM's heuristic, which picks NGram.
_DECODING_TYPES = {"NGram": "ngram", "AUTO": "ngram", "SA": "sa", "vllm_ngram": "vllm_ngram",
                   "suffix": "suffix", "pld": "pld"}

# TensorRT-LLM SADecodingConfig: the global pool has at most 1024 slots and matches at most 64 tokens.
SA_MAX_GLOBAL_SLOTS = 1024
SA_GLOBAL_MATCH_CAP = 64

# vLLM config/speculative.py: both prompt_lookup bounds default to 5 when neither is given.
VLLM_DEFAULT_LOOKUP = 5


@dataclass(frozen=True)
class DrafterSettings:
    """One drafter's settings. ``kind`` is one of ``ngram | sa | vllm_ngram | suffix | pld``.

    ``max_draft_len`` is K for replays and for the fixed-K precompute of the NGram pool; the
    simulator passes K per iteration. ``eos_token_ids``: HF's prompt lookup cuts a draft before the
    first EOS, and an output ending in one is not at its generation limit (``limits``).
    ``max_model_len`` bounds vLLM's suffix drafts (None: no bound, the traces are far from it).
    """

    kind: str
    max_draft_len: int = 4
    max_matching_ngram_size: Optional[int] = None
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True
    enable_global_pool: bool = False
    global_pool_size: Optional[int] = None
    prompt_lookup_min: Optional[int] = None
    prompt_lookup_max: Optional[int] = None
    suffix_max_tree_depth: int = 24
    suffix_max_cached_requests: int = 10000
    suffix_max_spec_factor: float = 1.0
    suffix_max_spec_offset: float = 0.0
    suffix_min_token_prob: float = 0.1
    pld_variant: str = "reference"
    eos_token_ids: tuple[int, ...] = ()
    max_model_len: Optional[int] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "eos_token_ids", tuple(int(t) for t in self.eos_token_ids))
        if self.kind not in KINDS:
            raise ConfigError(f"drafter: unknown kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.max_draft_len < 1:
            raise ConfigError(f"max_draft_len: must be >= 1 for a drafter, got {self.max_draft_len}")
        n = self.max_matching_ngram_size
        if self.kind == "sa":
            hi = SA_GLOBAL_MATCH_CAP if self.enable_global_pool else None
            if n is not None and not (n == -1 or (n >= 1 and (hi is None or n <= hi))):
                rng = f"in [1, {hi}]" if hi else ">= 1"
                raise ConfigError(f"max_matching_ngram_size: SA takes -1 (longest match) or a size {rng}, got {n}")
        elif n is not None and self.kind in ("ngram", "pld") and n < 1:
            raise ConfigError(f"max_matching_ngram_size: must be >= 1 for {self.kind}, got {n}")
        if self.global_pool_size is not None:
            if not (self.kind == "sa" and self.enable_global_pool):
                raise ConfigError("global_pool_size: requires enable_global_pool (SA)")
            if not 1 <= self.global_pool_size <= SA_MAX_GLOBAL_SLOTS:
                raise ConfigError(f"global_pool_size: must be in [1, {SA_MAX_GLOBAL_SLOTS}], got {self.global_pool_size}")
        for name in ("prompt_lookup_min", "prompt_lookup_max"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"{name}: must be >= 1, got {v}")
        lo, hi = self.lookup_range
        if lo > hi:
            raise ConfigError(f"prompt_lookup_min: must be <= prompt_lookup_max ({lo} > {hi})")
        if self.suffix_max_tree_depth < 1:
            raise ConfigError(f"suffix_max_tree_depth: must be >= 1, got {self.suffix_max_tree_depth}")
        if self.suffix_max_cached_requests < -1:
            raise ConfigError("suffix_max_cached_requests: must be >= 0 (0 disables the global tree) or -1 (no limit)")
        if not 0.0 <= self.suffix_min_token_prob <= 1.0:
            raise ConfigError(f"suffix_min_token_prob: must be in [0, 1], got {self.suffix_min_token_prob}")
        if self.suffix_max_spec_factor < 0:
            raise ConfigError(f"suffix_max_spec_factor: must be >= 0, got {self.suffix_max_spec_factor}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(f"max_model_len: must be >= 2, got {self.max_model_len}")
        if self.pld_variant not in ("reference", "hf"):
            raise ConfigError(f"pld_variant: choose reference or hf, got {self.pld_variant!r}")

    @property
    def ngram_size(self) -> int:
        """Effective ``max_matching_ngram_size`` (-1 = longest match, SA only)."""
        if self.max_matching_ngram_size is not None:
            return self.max_matching_ngram_size
        if self.kind == "sa":
            return -1
        if self.kind == "pld":
            return 3 if self.pld_variant == "reference" else 2
        return 2  # TRT NGramDecodingConfig default

    @property
    def lookup_range(self) -> tuple[int, int]:
        """vLLM's effective ``(prompt_lookup_min, prompt_lookup_max)``: 5/5 by default, one mirrors the other."""
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is None and hi is None:
            return VLLM_DEFAULT_LOOKUP, VLLM_DEFAULT_LOOKUP
        return (hi if lo is None else lo), (lo if hi is None else hi)

    def pool_slots(self, max_batch_size: int) -> int:
        """SA global pool size: ``global_pool_size`` or max(64, max_batch_size), never under the batch size."""
        size = self.global_pool_size if self.global_pool_size is not None else max(64, max_batch_size)
        if size < max_batch_size:
            raise ConfigError(f"global_pool_size: must be >= max_batch_size ({max_batch_size}), got {size}")
        if size > SA_MAX_GLOBAL_SLOTS:
            raise ConfigError(f"global_pool_size: the SA global pool holds at most {SA_MAX_GLOBAL_SLOTS} slots "
                              f"(max_batch_size {max_batch_size} needs {size})")
        return size

    def key(self) -> str:
        """The settings that change what this kind of drafter proposes, as a stable string (cache keys)."""
        fields = {"kind": self.kind}
        if self.kind == "ngram":
            fields.update(n=self.ngram_size, keep_all=self.is_keep_all, oldest=self.is_use_oldest,
                          public=self.is_public_pool, eos=self.eos_token_ids)  # EOS decides the limit
        elif self.kind == "sa":
            fields.update(n=self.ngram_size, global_pool=self.enable_global_pool)
        elif self.kind == "vllm_ngram":
            fields.update(range=self.lookup_range)
        elif self.kind == "pld":
            fields.update(n=self.ngram_size, variant=self.pld_variant,
                          eos=self.eos_token_ids if self.pld_variant == "hf" else ())
        else:
            fields.update({k: v for k, v in asdict(self).items() if k.startswith("suffix_")})
        return repr(sorted(fields.items()))

    @classmethod
    def from_spec(cls, spec, max_batch_size: int = 64, **overrides) -> "DrafterSettings":
        """Settings from a ``SpeculationConfig``; fields the user did not set keep the engine default.

        ``max_matching_ngram_size`` counts as unset when it is None or not in the model's
        ``model_fields_set``. ``decoding_type: AUTO`` takes TensorRT-LLM's ``suggest_spec_config``.
        """
        dtype = spec.decoding_type
        if dtype not in _DECODING_TYPES:
            raise ConfigError(f"speculation.decoding_type: {dtype!r} has no model-free drafter")
        explicit = getattr(spec, "model_fields_set", None)
        n = spec.max_matching_ngram_size
        if n is not None and explicit is not None and "max_matching_ngram_size" not in explicit:
            n = None  # the config's shared default must not override the engine's own per-drafter default
        fields = dict(
            kind=_DECODING_TYPES[dtype],
            max_draft_len=max(1, spec.max_draft_len),
            max_matching_ngram_size=n,
            is_keep_all=spec.is_keep_all,
            is_use_oldest=spec.is_use_oldest,
            is_public_pool=spec.is_public_pool,
            enable_global_pool=spec.enable_global_pool,
            global_pool_size=spec.global_pool_size,
            prompt_lookup_min=spec.prompt_lookup_min,
            prompt_lookup_max=spec.prompt_lookup_max,
            suffix_max_tree_depth=spec.suffix_max_tree_depth,
            suffix_max_cached_requests=spec.suffix_max_cached_requests,
            suffix_max_spec_factor=spec.suffix_max_spec_factor,
            suffix_max_spec_offset=spec.suffix_max_spec_offset,
            suffix_min_token_prob=spec.suffix_min_token_prob,
            pld_variant=spec.pld_variant,
            eos_token_ids=tuple(getattr(spec, "eos_token_ids", None) or ()),
        )
        if dtype == "AUTO":
            from specplan.simulator.presets import suggest_spec_config

            fields.update({k: v for k, v in suggest_spec_config(max_batch_size).items() if k in fields})
        fields.update(overrides)
        return cls(**fields)

    def with_(self, **changes) -> "DrafterSettings":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)
