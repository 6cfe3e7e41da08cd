"""Trace formats: which loader reads a file (told apart by name and first record), and
``load_workload``, the one entry point for a bundled trace name or a file of any format."""

from __future__ import annotations

import inspect
import os
from functools import lru_cache
from pathlib import Path
from typing import Callable

from specplan.errors import ConfigError, TraceError
from specplan.workloads.bundled import bundled_traces, check_trace, get_bundled
from specplan.workloads.burstgpt import BURSTGPT_COLUMNS, csv_header, load_burstgpt
from specplan.workloads.chat_templates import ChatTemplate
from specplan.workloads.datasets import (load_openai_requests, load_trtllm_bench, load_vllm_custom, load_vllm_sharegpt,
                                         load_vllm_sonnet)
from specplan.workloads.loaders import load_alpacaeval, load_chat, load_fastchat, load_prompt_response, load_wmt
from specplan.workloads.records import first_record
from specplan.workloads.request import Request
from specplan.workloads.timed import AZURE_COLUMNS, load_azure, load_mooncake
from specplan.workloads.tokenization import Tokenizer
from specplan.workloads.tokentrace import read_token_trace


#: format name -> loader; every loader takes the path first and ``tokenizer=``/``template=`` options
#: (except ``tokens``, already tokenized, and the length-only traces of :data:`LENGTH_ONLY`).
FORMATS: dict[str, Callable[..., list[Request]]] = {
    "tokens": read_token_trace,
    "fastchat": load_fastchat,
    "alpacaeval": load_alpacaeval,
    "prompt-response": load_prompt_response,
    "wmt": load_wmt,
    "chat": load_chat,
    "trtllm-bench": load_trtllm_bench,
    "vllm-sharegpt": load_vllm_sharegpt,
    "vllm-custom": load_vllm_custom,
    "vllm-sonnet": load_vllm_sonnet,
    "openai-requests": load_openai_requests,
    "azure": load_azure,
    "mooncake": load_mooncake,
    "burstgpt": load_burstgpt,
}
LENGTH_ONLY = ("azure", "mooncake", "burstgpt")
#: Other names a user may give for a format.
FORMAT_ALIASES = {"specbench": "fastchat", "mtbench": "fastchat", "aider": "prompt-response", "openai": "chat", "sharegpt": "chat",
                  "sonnet": "vllm-sonnet"}
#: Options that are not format options: the text-trace tokenizer and template.
TEXT_OPTIONS = ("tokenizer", "template")


def _sniff_csv(path: Path) -> str:
    header = csv_header(path)
    if tuple(header[:len(AZURE_COLUMNS)]) == AZURE_COLUMNS:
        return "azure"
    if set(BURSTGPT_COLUMNS) <= set(header):
        return "burstgpt"
    raise TraceError(f"{path}:1: cannot tell the trace format from columns {', '.join(header) or '(none)'}; give format: "
                     f"azure ({', '.join(AZURE_COLUMNS)}) or burstgpt ({', '.join(BURSTGPT_COLUMNS)}, ...)")


def _sniff_txt(path: Path) -> str:
    """WMT only with WMT's layout (a ``{pair}.src.txt`` source beside a system output); poem lines named
    like vLLM's ``benchmarks/sonnet.txt`` are ``vllm bench``'s sonnet dataset."""
    pair = path.name.split(".")[0]
    source = path.with_name(f"{pair}.src.txt")
    if source.name == path.name:
        raise TraceError(f"{path}: a WMT source file; give a system's output beside it ({pair}.SYSTEM.txt), "
                         "which reads this one as its source")
    if source.is_file():
        return "wmt"
    if "sonnet" in path.name.lower():
        return "vllm-sonnet"
    raise TraceError(f"{path}: cannot tell the format of a text file: not a WMT system output (no {source.name} "
                     f"beside it) nor named sonnet; give format: vllm-sonnet for poem lines, or another of "
                     f"{', '.join(f for f in FORMATS if f != 'vllm-sonnet')}")


def sniff_format(path: str | os.PathLike) -> str:
    """Tell a file's format from its name and first record (a CSV's header, a text file's layout);
    TraceError when it cannot. Never consulted when the user names a format."""
    path = Path(path)
    if path.name.endswith((".csv", ".csv.gz")):
        return _sniff_csv(path)
    if path.name.endswith((".txt", ".txt.gz")):
        return _sniff_txt(path)
    rec = first_record(path)
    keys = set(rec) if isinstance(rec, dict) else set()
    for fmt, needed in (("tokens", {"prompt_ids", "output_ids"}), ("fastchat", {"question_id", "choices"}),
                        ("chat", {"messages"}), ("chat", {"conversations"}), ("alpacaeval", {"instruction", "output"}),
                        ("prompt-response", {"prompt", "response"}), ("mooncake", {"hash_ids", "input_length"}),
                        ("trtllm-bench", {"task_id", "output_tokens"}), ("openai-requests", {"custom_id", "body"}),
                        ("vllm-custom", {"prompt"})):
        if needed <= keys:
            return fmt
    raise TraceError(f"{path}:1: cannot tell the trace format from fields {sorted(keys)}; pass a format ({', '.join(FORMATS)})")


def _option_params(fmt: str) -> dict[str, inspect.Parameter]:
    params = list(inspect.signature(FORMATS[fmt]).parameters.values())[1:]
    return {p.name: p for p in params if p.name not in TEXT_OPTIONS}


def format_options(fmt: str) -> list[str]:
    """The options (``workload.format_options``) a format's loader takes: its parameters other than
    the path and the text-trace tokenizer and template."""
    return list(_option_params(fmt))


def _check_options(fmt: str, options: dict) -> None:
    """Unknown option names, and values not of the default's type (a number for a length, text for an
    instruction; a name, list or path where the default is None), in one line; ranges are the loader's."""
    params = _option_params(fmt)
    for name, value in options.items():
        if name in TEXT_OPTIONS:
            continue
        if name not in params:
            raise ConfigError(f"workload.format_options: format {fmt} has no option {name!r} "
                              f"(options: {', '.join(params) or 'none'})")
        default = params[name].default
        kind = (str, list) if default is None or default is inspect.Parameter.empty else type(default)
        if not isinstance(value, kind) or isinstance(value, bool):
            want = {int: "an integer", str: "text"}.get(kind, "a name, list or path")
            raise ConfigError(f"workload.format_options.{name}: must be {want}, got {value!r}")


def load_file(path: str | os.PathLike, format: str | None = None, **options) -> list[Request]:
    """Load a trace file of any supported format: the named ``format`` when given (sniffing is then
    never consulted), else the sniffed one. ``options`` are ``tokenizer``/``template`` for text traces
    and the format's own options (:func:`format_options`)."""
    fmt = FORMAT_ALIASES.get(format, format) if format else sniff_format(path)
    if fmt not in FORMATS:
        raise ConfigError(f"format: unknown trace format {format!r}: choose one of {', '.join([*FORMATS, *FORMAT_ALIASES])}")
    text = [k for k in TEXT_OPTIONS if k in options]
    if fmt == "tokens" and text:
        raise ConfigError(f"format: a token trace is already tokenized; {', '.join(text)} do not apply")
    if fmt in LENGTH_ONLY and text:
        raise ConfigError(f"format: a {fmt} trace holds lengths only; {', '.join(text)} do not apply")
    _check_options(fmt, options)
    return FORMATS[fmt](path, **options)


@lru_cache(maxsize=16)
def _bundled_requests(name: str) -> tuple[Request, ...]:
    return tuple(read_token_trace(get_bundled(name).path))


def load_workload(
    name_or_path: str | os.PathLike,
    *,
    format: str | None = None,
    tokenizer: "str | Tokenizer | None" = None,
    template: "str | ChatTemplate | None" = None,
    **format_options,
) -> list[Request]:
    """Requests of a bundled trace (by name, see ``specplan workloads list``) or of a file.

    A path's format is sniffed from its name and first record unless ``format`` is given
    (:data:`FORMATS`, :data:`FORMAT_ALIASES`); ``tokenizer`` and ``template`` override the format's
    defaults for text traces. A model folder given as ``tokenizer`` without a ``template`` brings its
    own chat template (``specplan.workloads.model_folder``). ``format_options`` are the format's own
    settings (``workload.format_options``, :func:`format_options`), e.g. BurstGPT's ``model``. Bundled
    traces are pre-tokenized and take neither.
    """
    spec = str(name_or_path)
    if spec in bundled_traces("workload") and format is None and tokenizer is None and template is None:
        if format_options:
            raise ConfigError(f"workload.format_options: trace {spec!r} is bundled and already tokenized; "
                              f"{', '.join(format_options)} do not apply")
        return list(_bundled_requests(spec))
    check_trace(spec)
    path = Path(spec)
    if template is None and isinstance(tokenizer, (str, os.PathLike)) and (Path(tokenizer) / "tokenizer_config.json").is_file():
        from specplan.workloads.model_folder import model_folder

        folder = model_folder(str(tokenizer))
        tokenizer, template = folder.tokenizer, folder.template
    options = {k: v for k, v in (("tokenizer", tokenizer), ("template", template)) if v is not None}
    return load_file(path, format, **options, **format_options)
