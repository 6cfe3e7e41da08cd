"""Engine configs in: a TensorRT-LLM options YAML, a vLLM ``--speculative-config`` JSON, or a
``trtllm-serve ...`` / ``vllm serve ...`` command line, as specplan scenario sections.

Only what the file says is mapped: a field the file leaves out keeps the scenario's value (the
scenario is not silently switched to an engine default). Every top-level setting is reported as
mapped (``source -> section.field = value``) or ignored with the reason. The speculative config is
validated with the engine's own rules (``specplan.engine_config.export``) after its unmodelled
fields are set aside, so what goes in is what the engine would accept.

A complete engine config (an options YAML, a serve command) without a speculative config runs
without speculation in both engines, so it imports as ``speculation.decoding_type: none``; a section
the file does not touch is reported as kept from the scenario. Model names map to the catalogue
(``cost.model_name``) where it knows the architecture.

Field names: TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py`` (``TorchLlmArgs``: ``max_batch_size``,
``max_num_tokens``, ``enable_chunked_prefill``, ``disable_overlap_scheduler``,
``scheduler_config.capacity_scheduler_policy``, ``kv_cache_config.tokens_per_block`` /
``max_tokens`` / ``enable_block_reuse`` / ``dtype``); command-line options in ``specplan.engine_config.commands``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplan.engine_config.export import (
    TRTLLM_FIELDS,
    VLLM_FIELDS,
    validate_trtllm_speculative_config,
    validate_vllm_speculative_config,
)
from specplan.config_rules import check_batch_size_ranges
from specplan.engine_config.serve_line import join_lines, parse_options, split_command
from specplan.errors import ConfigError, read_failure

#: vLLM method -> specplan decoding_type.
VLLM_METHODS = {"ngram": "vllm_ngram", "suffix": "suffix"}
#: Model-based drafters: vLLM method / TensorRT-LLM decoding_type -> specplan decoding_type.
VLLM_MODEL_BASED = {"eagle": "Eagle3", "eagle3": "Eagle3", "mtp": "MTP"}
TRT_MODEL_BASED = {"Eagle3": "Eagle3", "Eagle": "Eagle3", "MTP": "MTP"}
#: vLLM ``SpeculativeConfig.suffix_decoding_max_tree_depth`` default (vllm/config/speculative.py).
VLLM_SUFFIX_MAX_TREE_DEPTH = 24
#: vLLM speculative-config field -> specplan speculation field (same name where absent).
VLLM_SPEC_FIELDS = {"num_speculative_tokens": "max_draft_len",
                    "suffix_decoding_max_tree_depth": "suffix_max_tree_depth",
                    "suffix_decoding_max_cached_requests": "suffix_max_cached_requests",
                    "suffix_decoding_max_spec_factor": "suffix_max_spec_factor",
                    "suffix_decoding_min_token_prob": "suffix_min_token_prob"}
_NOT_MODELLED = "the simulator has no counterpart; it does not change the executor loop specplan models"
_MODEL_NOTE = "the model is priced by the cost section (cost.model_name, cost.profile)"
_MAX_SEQ_LEN = "TensorRT-LLM's max_seq_len: specplan runs each request to its own length (engine.max_model_len is vLLM's)"


@dataclass
class ImportResult:
    """Scenario sections read from an engine config, with the report of what was mapped and ignored."""

    source: str
    engine: str
    sections: dict = field(default_factory=dict)
    mapped: list[tuple[str, str, Any]] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)

    def set(self, source_field: str, target: str, value: Any) -> None:
        """Map ``source_field`` to ``section.field`` = value."""
        section, name = target.split(".", 1)
        self.sections.setdefault(section, {})[name] = value
        self.mapped.append((source_field, target, value))

    def ignore(self, source_field: str, why: str) -> None:
        self.ignored.append((source_field, why))

    def keep(self, section: str, why: str) -> None:
        """Note that ``section`` is the scenario's own, not imported."""
        self.kept.append((section, why))

    def report(self) -> dict:
        """The JSON form: sections, mapped and ignored, for ``specplan config import --format json``."""
        return {"source": self.source, "engine": self.engine, "sections": self.sections,
                "mapped": [{"field": f, "to": t, "value": v} for f, t, v in self.mapped],
                "ignored": [{"field": f, "why": w} for f, w in self.ignored],
                "kept": [{"section": s, "why": w} for s, w in self.kept]}


# ----------------------------------------------------------------------------- speculative configs
def _split_known(cfg: dict, kind_key: str, fields: dict, source: str, result: ImportResult) -> dict:
    """The fields specplan models for this drafter; the others are reported as ignored."""
    kind = cfg.get(kind_key)
    if kind not in fields:
        return cfg  # the validator names the field
    known = {k: v for k, v in cfg.items() if k in fields[kind]}
    for name in cfg:
        if name not in known:
            result.ignore(f"{source}.{name}", f"not a setting of a model-free {kind} drafter that specplan simulates")
    return known


def _model_based(cfg: dict, source: str, kind_key: str, decoding_type: str, k_key: str, k: Any,
                 result: ImportResult) -> None:
    """A model-based drafter (Eagle3, MTP): its draft length is simulated, its acceptance comes from
    the scenario's ``acceptance`` section (alpha, per_position, length_dist or recorded)."""
    result.set(f"{source}.{kind_key}", "speculation.decoding_type", decoding_type)
    k = _int(k, f"{source}.{k_key}")
    result.set(f"{source}.{k_key}", "speculation.max_draft_len", k)
    ranges = cfg.get("num_speculative_tokens_per_batch_size")  # vLLM's dynamic SD applies to any drafter
    if ranges is not None:
        try:
            check_batch_size_ranges(ranges, max_k=k)
        except ValueError as exc:
            raise ConfigError(f"{source}.num_speculative_tokens_per_batch_size{exc}") from None
        result.set(f"{source}.num_speculative_tokens_per_batch_size", "speculation.num_speculative_tokens_per_batch_size",
                   [[int(x) for x in r] for r in ranges])
    for name in cfg:
        if name not in (kind_key, k_key, "num_speculative_tokens_per_batch_size", "num_nextn_predict_layers"):
            result.ignore(f"{source}.{name}", f"a setting of the {decoding_type} draft model; specplan takes its "
                                              "acceptance from acceptance.* instead")


def trtllm_speculation(cfg: Any, source: str, result: ImportResult) -> None:
    """A TensorRT-LLM ``speculative_config`` into ``speculation.*`` (the names are specplan's own)."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: expected a mapping")
    kind = cfg.get("decoding_type")
    if kind in TRT_MODEL_BASED:
        k_key = "max_draft_len"
        if kind == "MTP":
            # MTPDecodingConfig: num_nextn_predict_layers (default 1) "must match max_draft_len"
            # (docs/source/features/speculative-decoding.md); either one gives K
            k_key = "max_draft_len" if "max_draft_len" in cfg else "num_nextn_predict_layers"
            both = {cfg.get("max_draft_len"), cfg.get("num_nextn_predict_layers")} - {None}
            if len(both) > 1:
                raise ConfigError(f"{source}.num_nextn_predict_layers: {cfg['num_nextn_predict_layers']} must match "
                                  f"max_draft_len {cfg['max_draft_len']} (TensorRT-LLM MTP)")
        elif k_key not in cfg:
            raise ConfigError(f"{source}.max_draft_len: TensorRT-LLM needs it for {kind} (max_draft_len > 0)")
        _model_based(cfg, source, "decoding_type", TRT_MODEL_BASED[kind], k_key, cfg.get(k_key, 1), result)
        return
    known = _split_known(cfg, "decoding_type", TRTLLM_FIELDS, source, result)
    validate_trtllm_speculative_config(known, source)
    for name, value in known.items():
        if name == "draft_len_schedule":
            value = {int(b): int(k) for b, k in sorted(value.items())}
        result.set(f"{source}.{name}", f"speculation.{name}", value)


def vllm_speculation(cfg: Any, source: str, result: ImportResult) -> None:
    """A vLLM ``--speculative-config`` object into ``speculation.*``, with vLLM's own defaults
    (``vllm/config/speculative.py`` ``SpeculativeConfig``): suffix without ``num_speculative_tokens``
    drafts up to ``suffix_decoding_max_tree_depth`` (24); ngram needs ``num_speculative_tokens``."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: expected a JSON object")
    method = cfg.get("method")
    if method is None and "model" in cfg:
        raise ConfigError(f"{source}: a draft model ({cfg['model']}) without a method runs as vLLM's draft_model "
                          f"drafter, which specplan does not simulate (methods: ngram, suffix, eagle, eagle3, mtp)")
    if method in VLLM_MODEL_BASED or (isinstance(method, str) and method.endswith("_mtp")):
        if "num_speculative_tokens" not in cfg:
            raise ConfigError(f"{source}.num_speculative_tokens: give it for method {method} (vLLM reads it from "
                              "the draft model's config, which specplan does not read)")
        _model_based(cfg, source, "method", VLLM_MODEL_BASED.get(method, "MTP"), "num_speculative_tokens",
                     cfg["num_speculative_tokens"], result)
        return
    k_source = f"{source}.num_speculative_tokens"
    if method == "suffix" and "num_speculative_tokens" not in cfg:
        cfg = {**cfg, "num_speculative_tokens": cfg.get("suffix_decoding_max_tree_depth", VLLM_SUFFIX_MAX_TREE_DEPTH)}
        k_source += " (not given: vLLM drafts up to suffix_decoding_max_tree_depth)"
    known = _split_known(cfg, "method", VLLM_FIELDS, source, result)
    validate_vllm_speculative_config(known, source)
    for name, value in known.items():
        if name == "method":
            result.set(f"{source}.method", "speculation.decoding_type", VLLM_METHODS[value])
        elif name == "num_speculative_tokens_per_batch_size":
            result.set(f"{source}.{name}", f"speculation.{name}", [[int(x) for x in r] for r in value])
        else:
            where = k_source if name == "num_speculative_tokens" else f"{source}.{name}"
            result.set(where, f"speculation.{VLLM_SPEC_FIELDS.get(name, name)}", value)


# ----------------------------------------------------------------------------- TensorRT-LLM options YAML
def _int(value: Any, where: str, low: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{where}: must be an integer >= {low}, got {value!r}")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: must be true or false, got {value!r}")
    return value


def map_model(name: str, source_field: str, result: ImportResult) -> None:
    """A model name into ``cost.model_name`` where the catalogue knows its architecture."""
    from specplan.cost_models.models import get_model

    try:
        spec = get_model(name)
    except ConfigError:
        result.ignore(source_field, f"{name!r} is not in the model catalogue (specplan profile list); the scenario's "
                                    "cost.model_name prices the steps: set it, or give a config.json path")
        return
    result.set(source_field, "cost.model_name", spec.name)


#: Engine KV-cache dtypes by the bytes per element ``cost.kv_cache_dtype`` prices: vLLM's ``CacheDType``
#: (``vllm/config/cache.py``; fp8 = fp8_e4m3, all fp8 kinds one byte) and TensorRT-LLM's
#: ``KvCacheConfig.dtype``.
_KV_DTYPES = {**dict.fromkeys(("bfloat16", "float16", "half", "bf16", "fp16"), "bf16"),
              **dict.fromkeys(("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "fp8_per_token_head"), "fp8")}


def map_kv_dtype(value: Any, source_field: str, result: ImportResult) -> None:
    """A KV-cache dtype into ``cost.kv_cache_dtype``; ``auto`` follows the model, as the unset field does."""
    if value in (None, "auto"):
        result.ignore(source_field, "auto: the KV cache takes the model's dtype, as cost.kv_cache_dtype unset does")
    elif str(value).lower() in _KV_DTYPES:
        result.set(source_field, "cost.kv_cache_dtype", _KV_DTYPES[str(value).lower()])
    else:
        result.ignore(source_field, f"{value}: cost.kv_cache_dtype prices bf16 or fp8 KV caches only; the scenario's "
                                    "KV format is kept")


def trtllm_options(data: dict, source: str, result: ImportResult) -> None:
    """The top level of an ``extra_llm_api_options`` YAML (``LlmArgs`` fields)."""
    for name, value in data.items():
        where = f"{source}: {name}"
        if name == "speculative_config":
            trtllm_speculation(value, "speculative_config", result)
        elif name in ("max_batch_size", "max_num_tokens"):
            result.set(name, f"engine.{name}", _int(value, where))
        elif name == "enable_chunked_prefill":
            result.set(name, "engine.enable_chunked_prefill", _bool(value, where))
        elif name == "disable_overlap_scheduler":
            result.set(name, "engine.overlap_scheduler", not _bool(value, where))
        elif name in ("tensor_parallel_size", "tp_size"):
            result.set(name, "cost.tp", _int(value, where))
        elif name == "model" and isinstance(value, str):
            map_model(value, name, result)
        elif name == "max_seq_len":
            result.ignore(name, _MAX_SEQ_LEN)
        elif name == "scheduler_config" and isinstance(value, dict):
            for key, v in value.items():
                if key == "capacity_scheduler_policy":
                    if v not in ("GUARANTEED_NO_EVICT", "MAX_UTILIZATION"):
                        raise ConfigError(f"{where}.{key}: {v!r} is not simulated (GUARANTEED_NO_EVICT or MAX_UTILIZATION)")
                    result.set(f"{name}.{key}", "engine.capacity_scheduler_policy", v)
                else:
                    result.ignore(f"{name}.{key}", _NOT_MODELLED)
        elif name == "kv_cache_config" and isinstance(value, dict):
            _trtllm_kv(value, where, result)
        else:
            result.ignore(name, _MODEL_NOTE if name == "backend" else _NOT_MODELLED)


def _trtllm_kv(kv: dict, where: str, result: ImportResult) -> None:
    # KVCacheManager: a token budget becomes ceil(max_tokens / tokens_per_block) blocks.
    block = _int(kv.get("tokens_per_block", 32), f"{where}.tokens_per_block")
    if "tokens_per_block" in kv:
        result.set("kv_cache_config.tokens_per_block", "engine.kv_block_size", block)
    for key, v in kv.items():
        if key == "max_tokens" and v is not None:
            result.set("kv_cache_config.max_tokens", "engine.kv_num_blocks", math.ceil(_int(v, f"{where}.max_tokens") / block))
        elif key == "enable_block_reuse":
            # KV block reuse is TensorRT-LLM's prefix caching (KVCacheManager reuses blocks of matching prefixes)
            result.set("kv_cache_config.enable_block_reuse", "engine.enable_prefix_caching", _bool(v, f"{where}.{key}"))
        elif key == "dtype":
            map_kv_dtype(v, "kv_cache_config.dtype", result)
        elif key == "free_gpu_memory_fraction":
            result.ignore(f"kv_cache_config.{key}", "specplan sizes the KV pool by engine.kv_budget_gb or engine.kv_num_blocks")
        elif key != "tokens_per_block":
            result.ignore(f"kv_cache_config.{key}", _NOT_MODELLED)


# ----------------------------------------------------------------------------- files
def _read_text(path: Path) -> str:
    """The file's text; a missing, unreadable, non-UTF-8 or empty file is refused in one line."""
    if not path.exists():
        raise ConfigError(f"--engine-config {path}: no such file")
    if not path.is_file():
        raise ConfigError(f"--engine-config {path}: not a file; give a TensorRT-LLM YAML, a vLLM JSON or a serve command")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); save the engine config as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({read_failure(exc)})") from None
    if not join_lines(text):
        raise ConfigError(f"{path}: empty engine config; give a TensorRT-LLM options YAML, a vLLM "
                          "--speculative-config JSON or a 'vllm serve' / 'trtllm-serve' command line")
    return text


def _read_yaml_mapping(path: Path) -> dict:
    from specplan.config import read_yaml

    _read_text(path)
    return read_yaml(path)


def _read_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


def _no_speculation(result: ImportResult, what: str) -> None:
    """A complete engine config without a speculative config runs without speculation (both engines:
    ``speculative_config`` None), so the scenario's drafter is not kept."""
    if "speculation" not in result.sections:
        result.set(f"(no speculative config in the {what})", "speculation.decoding_type", "none")


def _note_kept(result: ImportResult) -> None:
    for section, why in (("engine", "capacity and scheduling settings"), ("cost", "model, GPU and tensor parallelism")):
        names = set(result.sections.get(section, {})) - {"engine"}
        if not names:
            result.keep(section, f"the file sets none of its {why}: the scenario's own are kept")


# A release named in the pasted text: a container image tag or a pip pin (major.minor).
_RELEASE = {"vllm": re.compile(r"(?:vllm/vllm-openai:v?|\bvllm(?:-cpu)?==)(\d+\.\d+)"),
            "trtllm": re.compile(r"(?:tensorrt-llm/release:|\btensorrt[-_]llm==)(\d+\.\d+)")}


def _engine_version(text: str, engine: str, result: ImportResult) -> None:
    """``engine.version`` from an image tag or pip pin in ``text``, when its rules are modelled."""
    from specplan.simulator.paths import VERSIONS

    found = _RELEASE[engine].search(text)
    if found is None:
        return
    if found.group(1) in VERSIONS[engine]:
        result.set(found.group(0), "engine.version", found.group(1))
    else:
        result.ignore(found.group(0), f"release {found.group(1)} is not modelled: the latest rules apply")


def import_engine_config(path: str | Path) -> ImportResult:
    """Read an engine config file of any of the three kinds (told apart by content) into sections."""
    path = Path(path)
    text = _read_text(path)
    command = split_command(text, str(path))
    if command is not None:
        result = ImportResult(str(path), command[0])
        result.set("vllm serve" if command[0] == "vllm" else "trtllm-serve", "engine.engine", command[0])
        from specplan.engine_config.commands import apply_command

        apply_command(parse_options(*command), result, path.parent)
        _engine_version(text, command[0], result)
        _no_speculation(result, "command line")
    elif text.lstrip().startswith("{"):
        result = ImportResult(str(path), "vllm")
        result.set("method", "engine.engine", "vllm")
        vllm_speculation(_read_json(path, text), "speculative_config", result)
    else:
        data = _read_yaml_mapping(path)
        result = ImportResult(str(path), "trtllm")
        result.set("speculative_config" if "speculative_config" in data else "options", "engine.engine", "trtllm")
        trtllm_options(data, str(path), result)
        _no_speculation(result, "options file")
    _note_kept(result)
    return result


def merge_sections(data: dict, sections: dict) -> dict:
    """A scenario mapping with imported sections applied: ``speculation`` replaced whole (an engine's
    speculative config is complete in itself), the other sections updated field by field."""
    out = dict(data)
    for name, values in sections.items():
        base = out.get(name) or {}
        if not isinstance(base, dict):
            raise ConfigError(f"{name}: the scenario's section is not a mapping")
        out[name] = dict(values) if name == "speculation" else {**base, **values}
    return out


def engine_config_layer(path: str | Path | None):
    """What ``--engine-config FILE`` does to a scenario mapping (for ``config.load_config``), or None."""
    if path is None:
        return None
    sections = import_engine_config(path).sections
    return lambda data: merge_sections(data, sections)
