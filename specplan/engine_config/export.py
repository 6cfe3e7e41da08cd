"""Engine configs from a simulated speculation setting, and each engine's own validation rules.

- TensorRT-LLM: a YAML file ``speculative_config: {...}`` (the ``speculative_config`` of the LLM API
  options file), fields ``decoding_type``, ``max_draft_len``, the drafter's settings,
  ``draft_len_schedule`` ``{batch size upper bound: K}`` and the SpeculationGate fields.
- vLLM: the JSON object for ``--speculative-config``: ``method``, ``num_speculative_tokens``, the
  drafter's settings and ``num_speculative_tokens_per_batch_size`` ``[[start, end, K], ...]``.

The validators are pure functions over those engine-native mappings, with the rules in
docs SEMANTICS §3 (TensorRT-LLM ``validate_draft_len_schedule_and_sort``) and §7 (vLLM dynamic SD):
they raise ``ConfigError`` with one line naming the field. The file for the engine that was
simulated carries the simulated setting exactly; the other engine's file is a translation of the same
bands onto its closest drafter (NGram/SA <-> ngram, suffix -> SA), which was not itself simulated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import ValidationError

from specplan.config import SpeculationConfig, format_validation_error, read_yaml
from specplan.config_rules import check_batch_size_ranges
from specplan.errors import ConfigError
from specplan.acceptance.drafters.settings import DrafterSettings
from specplan.simulator.paths import path_for
from specplan.simulator.presets import convert_schedule, schedule_to_ranges
from specplan.atomic import atomic_write_text

_TRT_COMMON = ("decoding_type", "max_draft_len", "draft_len_schedule", "max_concurrency",
               "acceptance_rate_window_size", "acceptance_rate_threshold")
TRTLLM_FIELDS = {
    "NGram": _TRT_COMMON + ("max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"),
    "SA": _TRT_COMMON + ("max_matching_ngram_size", "enable_global_pool", "global_pool_size"),
}
_VLLM_COMMON = ("method", "num_speculative_tokens", "num_speculative_tokens_per_batch_size")
VLLM_FIELDS = {
    "ngram": _VLLM_COMMON + ("prompt_lookup_min", "prompt_lookup_max"),
    "suffix": _VLLM_COMMON + ("suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
                              "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob"),
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ----------------------------------------------------------------------------- validators
def _check_shape(cfg: Any, source: str, kind_key: str, fields: dict, count_key: str, what: str) -> None:
    """What both engines' validators share: a mapping, a known kind, only that kind's fields, and a
    draft count that is an integer >= 1."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: expected a mapping")
    kind = cfg.get(kind_key)
    if kind not in fields:
        raise ConfigError(f"{source}.{kind_key}: {kind!r} is not a {what} ({' or '.join(fields)})")
    for name in cfg:
        if name not in fields[kind]:
            raise ConfigError(f"{source}.{name}: unknown field for {kind_key} {kind}")
    count = cfg.get(count_key)
    if not _is_int(count) or count < 1:
        raise ConfigError(f"{source}.{count_key}: must be an integer >= 1, got {count!r}")


def validate_trtllm_speculative_config(cfg: Any, source: str = "speculative_config") -> None:
    """TensorRT-LLM's rules for a model-free ``speculative_config`` (raises ``ConfigError``).

    Known fields only (per decoding type); ``max_draft_len`` an integer >= 1; the schedule's keys
    >= 1 and values >= 0, its smallest key mapping to ``max_draft_len``, every value <=
    ``max_draft_len``, exclusive with ``max_concurrency``; the gate's two fields together, the window
    >= 0 and the threshold in [0, 1]; NGram n-gram size >= 1, SA's -1 or 1..64.
    """
    _check_shape(cfg, source, "decoding_type", TRTLLM_FIELDS, "max_draft_len", "model-free TensorRT-LLM drafter")
    sched = cfg.get("draft_len_schedule")
    if sched is not None:
        if not isinstance(sched, dict) or not all(_is_int(b) and _is_int(v) for b, v in sched.items()):
            raise ConfigError(f"{source}.draft_len_schedule: expected a mapping of integer batch size to integer K")
    try:
        SpeculationConfig.model_validate(cfg)  # the schedule, gate and drafter rules (specplan.simulator.control)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def validate_vllm_speculative_config(cfg: Any, source: str = "speculative_config") -> None:
    """vLLM's rules for ``--speculative-config`` with a model-free method (raises ``ConfigError``).

    Known fields only (per method); ``num_speculative_tokens`` an integer >= 1;
    ``num_speculative_tokens_per_batch_size`` as vLLM's ``validate_and_normalize_dynamic_sd_schedule``
    takes it (``control.check_batch_size_ranges``: 3-item ``[start, end, K]`` or 5-item
    ``[start, end, ctx_lo, ctx_hi, K]`` entries, any order, ``0 <= K <= num_speculative_tokens``);
    ``1 <= prompt_lookup_min <= prompt_lookup_max``; suffix settings in range.
    """
    _check_shape(cfg, source, "method", VLLM_FIELDS, "num_speculative_tokens", "model-free vLLM method")
    n = cfg["num_speculative_tokens"]
    ranges = cfg.get("num_speculative_tokens_per_batch_size")
    if ranges is not None:
        try:
            check_batch_size_ranges(ranges, max_k=n)
        except ValueError as exc:
            raise ConfigError(f"{source}.num_speculative_tokens_per_batch_size{exc}") from None
    lo, hi = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    for name, v in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
        if v is not None and (not _is_int(v) or v < 1):
            raise ConfigError(f"{source}.{name}: must be an integer >= 1, got {v!r}")
    if lo is not None and hi is not None and lo > hi:
        raise ConfigError(f"{source}.prompt_lookup_min: must be <= prompt_lookup_max")
    checks = (("suffix_decoding_max_tree_depth", lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
              ("suffix_decoding_max_cached_requests", lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
              ("suffix_decoding_max_spec_factor", lambda v: _is_num(v) and v >= 0, "a number >= 0"),
              ("suffix_decoding_min_token_prob", lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]"))
    for name, ok, what in checks:
        if name in cfg and not ok(cfg[name]):
            raise ConfigError(f"{source}.{name}: must be {what}, got {cfg[name]!r}")


# ----------------------------------------------------------------------------- writers
EXPORTABLE = ("NGram", "SA", "vllm_ngram", "suffix")


def _settings(spec: SpeculationConfig) -> DrafterSettings:
    """The drafter's effective settings (engine defaults filled in), after checking it can be exported."""
    if spec.decoding_type not in EXPORTABLE:
        raise ConfigError(f"speculation.decoding_type: {spec.decoding_type!r} has no model-free engine drafter "
                          f"config to export ({', '.join(EXPORTABLE)})")
    if spec.max_draft_len < 1:
        raise ConfigError("speculation.max_draft_len: the engines need max_draft_len >= 1")
    return DrafterSettings.from_spec(spec)


def _max_batch(schedule: dict, max_batch_size: Optional[int]) -> int:
    return max_batch_size if max_batch_size is not None else max(schedule)


def _own_keys(spec: SpeculationConfig, keys: Optional[str]) -> str:
    """How the setting's ``draft_len_schedule`` reads when not told: as on its drafter's own path
    (vLLM drafters: as vLLM ranges ending at each key)."""
    if keys is not None:
        return keys
    if spec.decoding_type in ("vllm_ngram", "suffix"):
        return "upper_bound"
    return spec.schedule_lookup or path_for("trtllm", spec.decoding_type).schedule_lookup


def trtllm_speculative_config(spec: SpeculationConfig, keys: Optional[str] = None,
                              max_batch_size: Optional[int] = None) -> dict:
    """TensorRT-LLM's ``speculative_config`` for a setting (vLLM drafters mapped to the closest one).

    ``keys`` says how ``spec.draft_len_schedule`` is written (default: as on the drafter's own path); the exported schedule uses the keys of
    the path it lands on: lower bounds for the NGram drafter (``Drafter.get_draft_len_for_batch_size``),
    upper bounds for one-model SA (``update_draft_len``), the same K per batch size up to
    ``max_batch_size`` (default: the largest key)."""
    settings = _settings(spec)
    if spec.decoding_type == "NGram":
        out = {"decoding_type": "NGram", "max_draft_len": spec.max_draft_len,
               "max_matching_ngram_size": settings.ngram_size, "is_keep_all": spec.is_keep_all,
               "is_use_oldest": spec.is_use_oldest, "is_public_pool": spec.is_public_pool}
    elif spec.decoding_type == "SA":
        out = {"decoding_type": "SA", "max_draft_len": spec.max_draft_len,
               "max_matching_ngram_size": settings.ngram_size}
        if spec.enable_global_pool:
            out["enable_global_pool"] = True
            if spec.global_pool_size is not None:
                out["global_pool_size"] = spec.global_pool_size
    elif spec.decoding_type == "vllm_ngram":  # TRT's NGram over sizes up to vLLM's largest, pool fields spelt out
        out = {"decoding_type": "NGram", "max_draft_len": spec.max_draft_len,
               "max_matching_ngram_size": settings.lookup_range[1], "is_keep_all": spec.is_keep_all,
               "is_use_oldest": spec.is_use_oldest, "is_public_pool": spec.is_public_pool}
    else:  # suffix: the suffix automaton, longest match
        out = {"decoding_type": "SA", "max_draft_len": spec.max_draft_len, "max_matching_ngram_size": -1}
    schedule = spec.draft_len_schedule
    if schedule is None and spec.num_speculative_tokens_per_batch_size:
        schedule, keys = {r[1]: r[-1] for r in spec.num_speculative_tokens_per_batch_size}, "upper_bound"
    if schedule is not None:
        dst = "lower_bound" if out["decoding_type"] == "NGram" else "upper_bound"
        schedule = convert_schedule(schedule, _own_keys(spec, keys), dst, _max_batch(schedule, max_batch_size))
        out["draft_len_schedule"] = {int(b): int(schedule[b]) for b in sorted(schedule)}
    if spec.max_concurrency is not None:
        out["max_concurrency"] = spec.max_concurrency
    if spec.acceptance_rate_window_size is not None:
        out["acceptance_rate_window_size"] = spec.acceptance_rate_window_size
        out["acceptance_rate_threshold"] = spec.acceptance_rate_threshold
    validate_trtllm_speculative_config(out)
    return out


def vllm_speculative_config(spec: SpeculationConfig, keys: Optional[str] = None,
                            max_batch_size: Optional[int] = None) -> dict:
    """vLLM's ``--speculative-config`` for a setting (TensorRT-LLM drafters mapped to the closest one).

    A ``draft_len_schedule`` ``{upper bound: K}`` becomes inclusive ranges covering 1..largest key;
    its last band should end at the largest batch size served, since vLLM carries the last K past the
    last range where TensorRT-LLM drops to 0 (``recommend`` always writes bands up to
    ``max_batch_size``). The SpeculationGate and ``max_concurrency`` have no vLLM counterpart.
    """
    settings = _settings(spec)
    if spec.decoding_type == "suffix":
        out = {"method": "suffix", "num_speculative_tokens": spec.max_draft_len,
               "suffix_decoding_max_tree_depth": spec.suffix_max_tree_depth,
               "suffix_decoding_max_cached_requests": spec.suffix_max_cached_requests,
               "suffix_decoding_max_spec_factor": spec.suffix_max_spec_factor,
               "suffix_decoding_min_token_prob": spec.suffix_min_token_prob}
    elif spec.decoding_type == "vllm_ngram":
        out = {"method": "ngram", "num_speculative_tokens": spec.max_draft_len}
        if spec.prompt_lookup_min is not None:
            out["prompt_lookup_min"] = spec.prompt_lookup_min
        if spec.prompt_lookup_max is not None:
            out["prompt_lookup_max"] = spec.prompt_lookup_max
    else:  # NGram / SA: vLLM's n-gram proposer over sizes 1..max_matching_ngram_size (longest: its default)
        n = settings.ngram_size if settings.ngram_size > 0 else settings.lookup_range[1]
        out = {"method": "ngram", "num_speculative_tokens": spec.max_draft_len,
               "prompt_lookup_min": 1, "prompt_lookup_max": n}
    ranges = spec.num_speculative_tokens_per_batch_size
    if ranges is None and spec.draft_len_schedule is not None:
        sched = spec.draft_len_schedule
        ranges = schedule_to_ranges(convert_schedule(sched, _own_keys(spec, keys), "upper_bound",
                                                     _max_batch(sched, max_batch_size)))
    if ranges is not None:
        out["num_speculative_tokens_per_batch_size"] = [[int(x) for x in r] for r in ranges]
    validate_vllm_speculative_config(out)
    return out


#: Drafters each engine lacks -> what the export substitutes (the other engine's closest drafter).
SUBSTITUTES = {
    "trtllm": {"vllm_ngram": "NGram (TensorRT-LLM's n-gram pool over sizes up to prompt_lookup_max)",
               "suffix": "SA (the suffix automaton, longest match)"},
    "vllm": {"NGram": "method ngram (vLLM's n-gram proposer, prompt_lookup 1..max_matching_ngram_size)",
             "SA": "method ngram (vLLM's n-gram proposer; vLLM has no suffix automaton)"},
}


def substitute_note(spec: SpeculationConfig, engine: str) -> Optional[str]:
    """One line naming the drafter an export to ``engine`` substitutes for ``spec``'s, or None when
    the engine has that drafter."""
    sub = SUBSTITUTES[engine].get(spec.decoding_type)
    if sub is None:
        return None
    name = "TensorRT-LLM" if engine == "trtllm" else "vLLM"
    return f"{name} has no {spec.decoding_type} drafter: exported as {sub}, and simulated as that"


def trtllm_plain_options(max_batch_size: int, max_num_tokens: int) -> dict:
    """TensorRT-LLM LLM API options without ``speculative_config``: the engine runs without speculation."""
    return {"max_batch_size": max_batch_size, "max_num_tokens": max_num_tokens}


def vllm_plain_command(max_num_seqs: int, max_num_batched_tokens: int) -> str:
    """A ``vllm serve`` line without ``--speculative-config``: the engine runs without speculation."""
    return f"vllm serve --max-num-seqs {max_num_seqs} --max-num-batched-tokens {max_num_batched_tokens}"


def write_trtllm_yaml(cfg: dict, path: str | Path, comment: Optional[str] = None) -> Path:
    """Write ``speculative_config:`` YAML (validated first), atomically."""
    validate_trtllm_speculative_config(cfg)
    text = (f"# {comment}\n" if comment else "") + yaml.safe_dump({"speculative_config": cfg}, sort_keys=False)
    path = Path(path)
    atomic_write_text(path, text)
    return path


def write_trtllm_options(options: dict, path: str | Path, comment: str) -> Path:
    """Write a TensorRT-LLM options YAML without a speculative config, atomically."""
    path = Path(path)
    atomic_write_text(path, f"# {comment}\n" + yaml.safe_dump(options, sort_keys=False))
    return path


def write_vllm_command(command: str, path: str | Path, comment: str) -> Path:
    """Write a ``vllm serve`` line (add your model after ``serve``), atomically."""
    path = Path(path)
    atomic_write_text(path, f"# {comment}\n# add your model after 'vllm serve'\n{command}\n")
    return path


def write_vllm_json(cfg: dict, path: str | Path) -> Path:
    """Write the ``--speculative-config`` JSON object (validated first), atomically."""
    validate_vllm_speculative_config(cfg)
    path = Path(path)
    atomic_write_text(path, json.dumps(cfg, indent=2) + "\n")
    return path


def load_trtllm_yaml(path: str | Path) -> dict:
    """Read a TensorRT-LLM options YAML back and validate its ``speculative_config``."""
    data = read_yaml(path)
    if "speculative_config" not in data:
        raise ConfigError(f"{path}: no speculative_config section")
    validate_trtllm_speculative_config(data["speculative_config"], f"{path}: speculative_config")
    return data["speculative_config"]


def load_vllm_json(path: str | Path) -> dict:
    """Read a vLLM ``--speculative-config`` JSON file back and validate it."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    validate_vllm_speculative_config(data, str(path))
    return data
