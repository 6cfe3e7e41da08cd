"""``vllm serve`` / ``trtllm-serve`` options as scenario sections (the command already split by
``specplan.engine_config.serve_line``).

vLLM option names: ``vllm/engine/arg_utils.py`` (``EngineArgs``): ``--max-model-len``,
``--max-num-seqs``, ``--max-num-batched-tokens``, ``--enable-chunked-prefill`` /
``--no-enable-chunked-prefill``, ``--enable-prefix-caching`` / ``--no-enable-prefix-caching``,
``--scheduling-policy``, ``--tensor-parallel-size`` (``-tp``), ``--block-size``,
``--num-gpu-blocks-override``, ``--kv-cache-dtype``, ``--speculative-config``; the model is the
positional word or ``--model``. trtllm-serve: ``tensorrt_llm/commands/serve.py`` (``--max_batch_size``,
``--max_num_tokens``, ``--tp_size``, ``--max_seq_len``, ``--extra_llm_api_options`` / ``--config``,
whose settings trtllm-serve applies over the flags).
"""

from __future__ import annotations

from pathlib import Path

from specplan.engine_config.importer import (_MAX_SEQ_LEN, _NOT_MODELLED, ImportResult, _read_yaml_mapping,
                                             map_kv_dtype, map_model, trtllm_options, vllm_speculation)
from specplan.engine_config.serve_line import Command, json_option, parse_human_int
from specplan.errors import ConfigError

_VLLM_INTS = {"max-num-seqs": "engine.max_batch_size", "max-num-batched-tokens": "engine.max_num_tokens",
              "max-model-len": "engine.max_model_len", "block-size": "engine.kv_block_size",
              "num-gpu-blocks-override": "engine.kv_num_blocks", "tensor-parallel-size": "cost.tp", "tp": "cost.tp"}
_VLLM_SWITCHES = {"enable-chunked-prefill": ("engine.enable_chunked_prefill", True),
                  "no-enable-chunked-prefill": ("engine.enable_chunked_prefill", False),
                  "enable-prefix-caching": ("engine.enable_prefix_caching", True),
                  "no-enable-prefix-caching": ("engine.enable_prefix_caching", False)}
_TRT_INTS = {"max-batch-size": "engine.max_batch_size", "max-num-tokens": "engine.max_num_tokens", "tp-size": "cost.tp"}
_TRT_SWITCHES = {"enable-chunked-prefill": ("engine.enable_chunked_prefill", True)}


def _model(cmd: Command, result: ImportResult) -> None:
    """The served model: the positional word, or ``--model`` (both given and different: refused)."""
    flag = cmd.options.get("model")
    words = cmd.positional
    if flag is not None and words and words[0] != flag:
        raise ConfigError(f"--model {flag!r} and the positional model {words[0]!r} differ; give the model once")
    name = flag if flag is not None else (words[0] if words else None)
    if name is not None:
        map_model(name, "--model" if flag is not None else name, result)
    for extra in words[1:]:
        result.ignore(extra, "an extra positional word; the command takes one model")


def _same_target(cmd: Command, table: dict) -> None:
    """Two spellings of one setting (``-tp`` and ``--tensor-parallel-size``) count as the setting twice."""
    seen: dict = {}
    for name in cmd.options:
        target = table.get(name)
        target = target[0] if isinstance(target, tuple) else target
        if target is None:
            continue
        if target in seen:
            raise ConfigError(f"{cmd.spelled[seen[target]]} and {cmd.spelled[name]} set the same setting "
                              f"({target}); give it once")
        seen[target] = name


def vllm_command(cmd: Command, result: ImportResult) -> None:
    """``vllm serve MODEL --flag value ...`` (dashes and underscores both accepted, as vLLM does)."""
    _same_target(cmd, {**_VLLM_INTS, **_VLLM_SWITCHES})
    _model(cmd, result)
    for name, value in cmd.options.items():
        shown = cmd.spelled[name]
        if name in _VLLM_INTS:
            result.set(shown, _VLLM_INTS[name], parse_human_int(value, name))
        elif name in _VLLM_SWITCHES:
            target, on = _VLLM_SWITCHES[name]
            result.set(shown, target, on)
        elif name == "scheduling-policy":
            if value != "fcfs":
                raise ConfigError(f"--scheduling-policy {value}: specplan simulates vLLM's fcfs scheduling only")
            result.ignore(shown, "fcfs: the order specplan's scheduler serves requests in")
        elif name == "kv-cache-dtype":
            map_kv_dtype(value, shown, result)
        elif name in ("speculative-config", "model"):
            continue
        else:
            result.ignore(shown, _NOT_MODELLED)
    for base in cmd.dotted:
        if base != "speculative-config":
            result.ignore(f"--{base}.*", _NOT_MODELLED)
    spec = json_option(cmd, "speculative-config")
    if spec is not None:
        vllm_speculation(spec, "--speculative-config", result)


def trtllm_command(cmd: Command, result: ImportResult, root: Path) -> None:
    """``trtllm-serve MODEL --flag value ... [--extra_llm_api_options FILE]`` (the file read as well,
    its settings applied after the flags, as ``trtllm-serve`` merges them: a flag the file sets again is
    reported as overridden)."""
    _same_target(cmd, {**_TRT_INTS, **_TRT_SWITCHES, "extra-llm-api-options": "options", "config": "options"})
    _model(cmd, result)
    extra = None
    for name, value in cmd.options.items():
        shown = cmd.spelled[name]
        if name in _TRT_INTS:
            result.set(shown, _TRT_INTS[name], parse_human_int(value, name))
        elif name in _TRT_SWITCHES:
            result.set(shown, *_TRT_SWITCHES[name])
        elif name in ("extra-llm-api-options", "config"):
            extra = value
        elif name == "max-seq-len":
            result.ignore(shown, _MAX_SEQ_LEN)
        elif name != "model":
            result.ignore(shown, _NOT_MODELLED)
    if extra is None:
        return
    path = Path(extra) if Path(extra).is_absolute() else root / extra
    if not path.is_file() and (root / path.name).is_file():
        path = root / path.name  # a command pasted from the serving machine, its options file beside it here
    if not path.is_file():
        raise ConfigError(f"--extra_llm_api_options {extra}: no such file (read relative to {root}); put the "
                          "options YAML there or give an absolute path")
    before = {t: src for src, t, _ in result.mapped}
    trtllm_options(_read_yaml_mapping(path), str(path), result)
    for src, target, _ in result.mapped[len(before):]:
        if target in before and before[target] != src:
            result.ignore(before[target], f"overridden by {path.name}: {src} (trtllm-serve applies the options file last)")


def apply_command(cmd: Command, result: ImportResult, root: Path) -> None:
    """The command's options into ``result``; an options file it names is read relative to ``root``."""
    if cmd.engine == "vllm":
        vllm_command(cmd, result)
    else:
        trtllm_command(cmd, result, root)
