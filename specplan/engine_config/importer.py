"""Engine configs in: a TensorRT-LLM options YAML, a vLLM ``--speculative-config`` JSON, or a
``trtllm-serve ...`` / ``vllm serve ...`` command line, as specplan scenario sections.

Only what the file says is mapped: a field the file leaves out keeps the scenario's value (the
scenario is not silently switched to an engine default). Every top-level setting is reported as
mapped (``source -> section.field = value``) or ignored with the reason. The speculative config is
validated with the engine's own rules (``specplan.engine_config.export``) after its unmodelled
fields are set aside, so what goes in is what the engine would accept.

Field names: TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py`` (``TorchLlmArgs``: ``max_batch_size``,
``max_num_tokens``, ``enable_chunked_prefill``, ``disable_overlap_scheduler``,
``scheduler_config.capacity_scheduler_policy``, ``kv_cache_config.tokens_per_block`` /
``max_tokens``); vLLM ``vllm/engine/arg_utils.py`` (``--max-num-seqs``, ``--max-num-batched-tokens``,
``--block-size``, ``--num-gpu-blocks-override``, ``--enable-chunked-prefill``,
``--tensor-parallel-size``, ``--speculative-config``).
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplan.engine_config.export import (
    TRTLLM_FIELDS,
    VLLM_FIELDS,
    validate_trtllm_speculative_config,
    validate_vllm_speculative_config,
)
from specplan.errors import ConfigError

#: vLLM method -> specplan decoding_type.
VLLM_METHODS = {"ngram": "vllm_ngram", "suffix": "suffix"}
#: vLLM speculative-config field -> specplan speculation field (same name where absent).
VLLM_SPEC_FIELDS = {"num_speculative_tokens": "max_draft_len",
                    "suffix_decoding_max_tree_depth": "suffix_max_tree_depth",
                    "suffix_decoding_max_cached_requests": "suffix_max_cached_requests",
                    "suffix_decoding_max_spec_factor": "suffix_max_spec_factor",
                    "suffix_decoding_min_token_prob": "suffix_min_token_prob"}
_NOT_MODELLED = "the simulator has no counterpart; it does not change the executor loop specplan models"
_MODEL_NOTE = "the model is priced by the cost section (cost.model_name, cost.profile)"


@dataclass
class ImportResult:
    """Scenario sections read from an engine config, with the report of what was mapped and ignored."""

    source: str
    engine: str
    sections: dict = field(default_factory=dict)
    mapped: list[tuple[str, str, Any]] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)

    def set(self, source_field: str, target: str, value: Any) -> None:
        """Map ``source_field`` to ``section.field`` = value."""
        section, name = target.split(".", 1)
        self.sections.setdefault(section, {})[name] = value
        self.mapped.append((source_field, target, value))

    def ignore(self, source_field: str, why: str) -> None:
        self.ignored.append((source_field, why))

    def report(self) -> dict:
        """The JSON form: sections, mapped and ignored, for ``specplan config import --format json``."""
        return {"source": self.source, "engine": self.engine, "sections": self.sections,
                "mapped": [{"field": f, "to": t, "value": v} for f, t, v in self.mapped],
                "ignored": [{"field": f, "why": w} for f, w in self.ignored]}


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


def trtllm_speculation(cfg: Any, source: str, result: ImportResult) -> None:
    """A TensorRT-LLM ``speculative_config`` into ``speculation.*`` (the names are specplan's own)."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: expected a mapping")
    known = _split_known(cfg, "decoding_type", TRTLLM_FIELDS, source, result)
    validate_trtllm_speculative_config(known, source)
    for name, value in known.items():
        if name == "draft_len_schedule":
            value = {int(b): int(k) for b, k in sorted(value.items())}
        result.set(f"{source}.{name}", f"speculation.{name}", value)


def vllm_speculation(cfg: Any, source: str, result: ImportResult) -> None:
    """A vLLM ``--speculative-config`` object into ``speculation.*``."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: expected a JSON object")
    known = _split_known(cfg, "method", VLLM_FIELDS, source, result)
    validate_vllm_speculative_config(known, source)
    for name, value in known.items():
        if name == "method":
            result.set(f"{source}.method", "speculation.decoding_type", VLLM_METHODS[value])
        elif name == "num_speculative_tokens_per_batch_size":
            result.set(f"{source}.{name}", f"speculation.{name}", [[int(x) for x in r] for r in value])
        else:
            result.set(f"{source}.{name}", f"speculation.{VLLM_SPEC_FIELDS.get(name, name)}", value)


# ----------------------------------------------------------------------------- TensorRT-LLM options YAML
def _int(value: Any, where: str, low: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{where}: must be an integer >= {low}, got {value!r}")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: must be true or false, got {value!r}")
    return value


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
            result.ignore(name, _MODEL_NOTE if name in ("model", "backend") else _NOT_MODELLED)


def _trtllm_kv(kv: dict, where: str, result: ImportResult) -> None:
    # KVCacheManager: a token budget becomes ceil(max_tokens / tokens_per_block) blocks.
    block = _int(kv.get("tokens_per_block", 32), f"{where}.tokens_per_block")
    if "tokens_per_block" in kv:
        result.set("kv_cache_config.tokens_per_block", "engine.kv_block_size", block)
    for key, v in kv.items():
        if key == "max_tokens" and v is not None:
            result.set("kv_cache_config.max_tokens", "engine.kv_num_blocks", math.ceil(_int(v, f"{where}.max_tokens") / block))
        elif key == "free_gpu_memory_fraction":
            result.ignore(f"kv_cache_config.{key}", "specplan sizes the KV pool by engine.kv_budget_gb or engine.kv_num_blocks")
        elif key != "tokens_per_block":
            result.ignore(f"kv_cache_config.{key}", _NOT_MODELLED)


# ----------------------------------------------------------------------------- command lines
_VLLM_FLAGS = {"max-num-seqs": "engine.max_batch_size", "max-num-batched-tokens": "engine.max_num_tokens",
               "block-size": "engine.kv_block_size", "num-gpu-blocks-override": "engine.kv_num_blocks",
               "tensor-parallel-size": "cost.tp", "tp": "cost.tp"}
_TRT_FLAGS = {"max_batch_size": "engine.max_batch_size", "max_num_tokens": "engine.max_num_tokens",
              "tp_size": "cost.tp"}


#: Switches that take no value (so the word after one is not read as its value).
_SWITCHES = {"enable-chunked-prefill", "no-enable-chunked-prefill", "enable_chunked_prefill", "trust-remote-code",
             "trust_remote_code", "enforce-eager", "async-scheduling", "disable-log-requests", "disable-log-stats"}


def _options(args: list[str]) -> tuple[list[str], list[tuple[str, str | None]]]:
    """Positional arguments and ``(flag, value)`` pairs (``--a=b``, ``--a b`` or a bare switch)."""
    positional, flags, i = [], [], 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            positional.append(arg)
            i += 1
            continue
        name = arg.lstrip("-")
        if "=" in name:
            name, value = name.split("=", 1)
        elif name not in _SWITCHES and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value, i = args[i + 1], i + 1
        else:
            value = None
        flags.append((name, value))
        i += 1
    return positional, flags


def _int_flag(value: str | None, flag: str) -> int:
    try:
        return _int(int(value), f"--{flag}")
    except (TypeError, ValueError):
        raise ConfigError(f"--{flag}: expected an integer, got {value!r}") from None


def vllm_command(args: list[str], source: str, result: ImportResult) -> None:
    """``vllm serve MODEL --flag value ...`` (dashes and underscores both accepted, as vLLM does)."""
    positional, flags = _options(args)
    for p in positional:
        result.ignore(p, _MODEL_NOTE)
    for raw, value in flags:
        flag = raw.replace("_", "-")
        if flag in _VLLM_FLAGS:
            result.set(f"--{flag}", _VLLM_FLAGS[flag], _int_flag(value, flag))
        elif flag in ("enable-chunked-prefill", "no-enable-chunked-prefill"):
            on = flag == "enable-chunked-prefill"
            result.set(f"--{flag}", "engine.enable_chunked_prefill", on)
        elif flag in ("speculative-config", "sc"):
            try:
                spec = json.loads(value or "")
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{source}: --speculative-config: invalid JSON ({exc.msg})") from None
            vllm_speculation(spec, "--speculative-config", result)
        else:
            result.ignore(f"--{flag}", _NOT_MODELLED)


def trtllm_command(args: list[str], source: str, result: ImportResult, root: Path) -> None:
    """``trtllm-serve MODEL --flag value ... [--extra_llm_api_options FILE]`` (the file read as well,
    its settings applied after the flags, as ``trtllm-serve`` merges them)."""
    positional, flags = _options(args)
    for p in positional:
        result.ignore(p, _MODEL_NOTE)
    extra = None
    for raw, value in flags:
        flag = raw.replace("-", "_")
        if flag in _TRT_FLAGS:
            result.set(f"--{flag}", _TRT_FLAGS[flag], _int_flag(value, flag))
        elif flag in ("extra_llm_api_options", "config"):
            extra = value
        else:
            result.ignore(f"--{flag}", _NOT_MODELLED)
    if extra is not None:
        path = Path(extra) if Path(extra).is_absolute() else root / extra
        trtllm_options(_read_yaml_mapping(path), str(path), result)


# ----------------------------------------------------------------------------- files
def _read_yaml_mapping(path: Path) -> dict:
    from specplan.config import read_yaml

    return read_yaml(path)


def _read_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


def import_engine_config(path: str | Path) -> ImportResult:
    """Read an engine config file of any of the three kinds (told apart by content) into sections."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--engine-config {path}: no such file")
    text = path.read_text()
    # A shell command: comment lines dropped, backslash-continued lines joined.
    lines = [ln for ln in text.replace("\\\n", " ").splitlines() if not ln.lstrip().startswith("#")]
    command = " ".join(lines).strip()
    head = command.split(maxsplit=2)
    if head[:2] == ["vllm", "serve"] or (head and head[0] == "trtllm-serve"):
        try:
            args = shlex.split(command)
        except ValueError as exc:
            raise ConfigError(f"{path}: the command line cannot be split ({exc})") from None
        if args[0] == "vllm":
            result = ImportResult(str(path), "vllm")
            result.set("vllm serve", "engine.engine", "vllm")
            vllm_command(args[2:], str(path), result)
        else:
            result = ImportResult(str(path), "trtllm")
            result.set("trtllm-serve", "engine.engine", "trtllm")
            trtllm_command(args[1:], str(path), result, path.parent)
        return result
    if text.lstrip().startswith("{"):
        data = _read_json(path, text)
        result = ImportResult(str(path), "vllm")
        result.set("method", "engine.engine", "vllm")
        vllm_speculation(data, "speculative_config", result)
        return result
    data = _read_yaml_mapping(path)
    result = ImportResult(str(path), "trtllm")
    result.set("speculative_config" if "speculative_config" in data else "options", "engine.engine", "trtllm")
    trtllm_options(data, str(path), result)
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
