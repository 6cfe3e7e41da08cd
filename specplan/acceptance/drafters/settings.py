"""What a drafter reads: a view of one validated ``SpeculationConfig``, never a schema of its own.

``DrafterSettings`` wraps the pydantic model (the only definition of every setting and rule, in
``specplan.config``) and adds what follows from it: the drafter ``kind`` (the canonical
``decoding_type``), and the engine defaults a field left unset takes, which differ by drafter for
``max_matching_ngram_size`` (TRT NGram 2, TRT SA -1, reference PLD 3, HF PLD 2). The simulator builds
it from the scenario's speculation section; ``specplan acceptance`` builds the same model from its
flags, so both refuse the same values with the same line.
"""

from __future__ import annotations

from typing import Any

from specplan.config import SimConfig, SpeculationConfig, format_validation_error
from specplan.config_rules import SA_MAX_GLOBAL_SLOTS, canonical_decoding_type, effective_lookup_range
from specplan.errors import ConfigError

# The drafters replayed exactly (``decoding_type`` spellings); AUTO must be resolved first.
KINDS = ("NGram", "SA", "vllm_ngram", "suffix", "pld")


def speculation_from(kind: str, source: str = "drafter settings", **fields: Any) -> SpeculationConfig:
    """A validated ``SpeculationConfig`` for drafter ``kind`` (any accepted spelling) and fields.

    Validated as a scenario's ``speculation`` section, so a bad value is the same one ``ConfigError``
    line ``specplan simulate`` gives (``SOURCE: speculation.FIELD: ...``).
    """
    from pydantic import ValidationError

    try:
        return SimConfig.model_validate({"speculation": {"decoding_type": kind, **fields}}).speculation
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


class DrafterSettings:
    """One drafter's view of a ``SpeculationConfig``: every field reads through to the model.

    ``DrafterSettings(kind=..., **fields)`` validates the fields as the config does;
    ``DrafterSettings.from_spec(spec)`` wraps an existing model. ``max_draft_len`` is K for replays and
    the fixed-K precompute (at least 1); the simulator passes K per iteration. ``max_model_len`` (the
    engine's, ``engine.max_model_len``) bounds vLLM's suffix drafts; None: no bound.
    """

    __slots__ = ("spec", "kind", "max_model_len")

    def __init__(self, kind: str = "NGram", spec: SpeculationConfig | None = None, source: str = "drafter settings",
                 max_model_len: int | None = None, **fields: Any) -> None:
        if spec is None:
            spec = speculation_from(kind, source, **fields)
        kind = canonical_decoding_type(spec.decoding_type)
        if kind not in KINDS:
            raise ConfigError(f"speculation.decoding_type: {kind!r} has no model-free drafter to replay; "
                              f"choose one of {', '.join(KINDS)}")
        if max_model_len is not None and max_model_len < 2:
            raise ConfigError(f"engine.max_model_len: must be >= 2, got {max_model_len}")
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "max_model_len", max_model_len)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.spec, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("DrafterSettings is read-only; use with_(...)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DrafterSettings) and (self.spec, self.max_model_len) == (other.spec, other.max_model_len)

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"DrafterSettings({self.key()})"

    @property
    def max_draft_len(self) -> int:
        return max(1, self.spec.max_draft_len)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return tuple(int(t) for t in self.spec.eos_token_ids or ())

    @property
    def ngram_size(self) -> int:
        """Effective ``max_matching_ngram_size`` (-1 = longest match, SA only)."""
        n = self.spec.max_matching_ngram_size
        if n is not None and "max_matching_ngram_size" in self.spec.model_fields_set:
            return n
        if self.kind == "SA":
            return -1
        if self.kind == "pld":
            return 3 if self.spec.pld_variant == "reference" else 2
        return 2  # TRT NGramDecodingConfig default

    @property
    def lookup_range(self) -> tuple[int, int]:
        """vLLM's effective ``(prompt_lookup_min, prompt_lookup_max)``."""
        return effective_lookup_range(self.spec.prompt_lookup_min, self.spec.prompt_lookup_max)

    def pool_slots(self, max_batch_size: int) -> int:
        """SA global pool size: ``global_pool_size`` or max(64, max_batch_size), never under the batch size."""
        size = self.spec.global_pool_size if self.spec.global_pool_size is not None else max(64, max_batch_size)
        if size < max_batch_size:
            raise ConfigError(f"global_pool_size: must be >= max_batch_size ({max_batch_size}), got {size}")
        if size > SA_MAX_GLOBAL_SLOTS:
            raise ConfigError(f"global_pool_size: the SA global pool holds at most {SA_MAX_GLOBAL_SLOTS} slots "
                              f"(max_batch_size {max_batch_size} needs {size})")
        return size

    def key(self) -> str:
        """The settings that change what this kind of drafter proposes, as a stable string (cache keys)."""
        sp = self.spec
        fields: dict[str, Any] = {"kind": self.kind}
        if self.kind == "NGram":
            fields.update(n=self.ngram_size, keep_all=sp.is_keep_all, oldest=sp.is_use_oldest,
                          public=sp.is_public_pool, eos=self.eos_token_ids)  # EOS decides the generation limit
        elif self.kind == "SA":
            fields.update(n=self.ngram_size, global_pool=sp.enable_global_pool)
        elif self.kind == "vllm_ngram":
            fields.update(range=self.lookup_range)
        elif self.kind == "pld":
            fields.update(n=self.ngram_size, variant=sp.pld_variant,
                          eos=self.eos_token_ids if sp.pld_variant == "hf" else ())
        else:
            fields.update({k: getattr(sp, k) for k in SpeculationConfig.model_fields if k.startswith("suffix_")})
            fields.update(max_model_len=self.max_model_len)
        return repr(sorted(fields.items()))

    @classmethod
    def from_spec(cls, spec: SpeculationConfig, max_model_len: int | None = None, **overrides: Any) -> "DrafterSettings":
        """The drafter view of a resolved ``SpeculationConfig`` (AUTO already expanded by the engine
        preset), with ``overrides`` validated again."""
        if overrides:
            spec = speculation_from(spec.decoding_type, **{**spec.model_dump(exclude_unset=True), **overrides})
        return cls(spec=spec, max_model_len=max_model_len)

    def with_(self, **changes: Any) -> "DrafterSettings":
        """A copy with some fields changed (validated again)."""
        return DrafterSettings.from_spec(self.spec, changes.pop("max_model_len", self.max_model_len), **changes)
