"""The engine paths: which rule each engine applies to K, the token budget, the gate and the limits.

An engine does not have one speculative path but several, and they differ in every control-plane
rule (docs/semantics.md has one table per path, rule by rule, with the engine file and function):

- ``trtllm-drafter``: TensorRT-LLM with a ``Drafter`` object (NGram, and prompt lookup as a host
  drafter). K before scheduling from the drafter's own ``get_draft_len_for_batch_size`` on the
  active requests (``bisect_right``, keys are lower bounds); ``should_use_spec_decode`` gates the
  batch; requests scheduled while speculation is off are stamped ``py_disable_speculative_decoding``;
  the gate counts the verified pre-padding draft length.
- ``trtllm-one-model``: SA, MTP, Eagle3 inside the target forward. No drafter object, so no
  pre-schedule gate: every generation row is budgeted ``1 + K_static``; K for the step is
  ``update_draft_len`` on the scheduled batch (``utils.get_draft_len_for_batch_size``,
  ``bisect_left``, keys are upper bounds); the gate counts the K_static stamp per generation row.
- ``vllm``: V1 scheduler. Drafts are proposed after a step and known before the next one is
  scheduled, so a decode row costs ``1 + its draft``; K comes from this step's scheduled count and
  applies to the next step's drafts.
"""

from __future__ import annotations

from dataclasses import dataclass

TRT_DRAFTER = "trtllm-drafter"
TRT_ONE_MODEL = "trtllm-one-model"
VLLM = "vllm"

#: Drafters that run inside the target model's forward in TensorRT-LLM (one-model speculation).
ONE_MODEL_DRAFTERS = ("SA", "MTP", "Eagle3")


@dataclass(frozen=True)
class PathRules:
    """The engine's own rule for each control-plane choice on one path (the defaults of that path)."""

    name: str
    schedule_lookup: str  # lower_bound (Drafter, bisect_right) | upper_bound (utils, bisect_left)
    k_from: str  # active | scheduled: which request count picks K
    k_timing: str  # before_schedule | same_step (update_draft_len) | next_step (vLLM)
    budget: str  # placeholder (1 + K) | static (1 + K_static) | draft (1 + the proposed draft)
    batch_gate: bool  # Drafter.should_use_spec_decode decides on/off before scheduling
    stamps_disable: bool  # py_disable_speculative_decoding on requests scheduled while off
    gate_denominator: str  # drafted | padded | static | runtime
    # Draft positions a generation row verifies: static (1 + K_static, ``pad_draft_tokens_for_cuda_graph``
    # pads even an empty draft), runtime (1 + K: the one-model forward writes K draft slots), draft
    # (1 + its own draft: vLLM verifies only what was proposed; a row with no proposal computes 1).
    verify_width: str


PATHS = {
    TRT_DRAFTER: PathRules(TRT_DRAFTER, "lower_bound", "active", "before_schedule", "placeholder",
                           batch_gate=True, stamps_disable=True, gate_denominator="drafted", verify_width="static"),
    TRT_ONE_MODEL: PathRules(TRT_ONE_MODEL, "upper_bound", "scheduled", "same_step", "static",
                             batch_gate=False, stamps_disable=False, gate_denominator="static", verify_width="runtime"),
    VLLM: PathRules(VLLM, "vllm", "scheduled", "next_step", "draft",
                    batch_gate=False, stamps_disable=False, gate_denominator="drafted", verify_width="draft"),
}


#: The rules that changed between engine releases, in one table: engine -> ``engine.version`` -> the
#: rules that differ from ``latest`` (the code read for this page). docs/semantics.md lists each with
#: the engine code it was read from.
#: - ``dynamic_draft_len``: the one-model drafters in ``SpeculativeDecodingMode.support_dynamic_draft_len``,
#:   whose drafts ``update_draft_len`` re-sizes from a ``draft_len_schedule`` (and for which
#:   ``max_concurrency`` is translated into one); for the others K stays ``max_draft_len``.
VERSIONS = {
    "trtllm": {"latest": {"dynamic_draft_len": ONE_MODEL_DRAFTERS}, "1.2": {"dynamic_draft_len": ("Eagle3",)}},
    "vllm": {"latest": {}, "0.32": {}},
}


def version_rules(engine: str, version: str) -> dict:
    """The rules of ``engine`` at release ``version`` (``VERSIONS``); an unknown release is refused."""
    from specplan.errors import ConfigError

    if version not in VERSIONS[engine]:
        raise ConfigError(f"engine.version: {engine} {version!r} is not modelled; use one of "
                          f"{', '.join(repr(v) for v in VERSIONS[engine])}")
    return {**VERSIONS[engine]["latest"], **VERSIONS[engine][version]}


def dynamic_draft_len(engine: str, version: str, decoding_type: str) -> bool:
    """Whether a one-model drafter's K follows a ``draft_len_schedule`` at this release."""
    return decoding_type in version_rules(engine, version).get("dynamic_draft_len", ())


def path_for(engine: str, decoding_type: str) -> PathRules:
    """The path a drafter takes in an engine (``AUTO`` must be expanded first: it is NGram)."""
    if engine == "vllm":
        return PATHS[VLLM]
    return PATHS[TRT_ONE_MODEL if decoding_type in ONE_MODEL_DRAFTERS else TRT_DRAFTER]
