"""Trace formats: which loader reads a file (told apart by name and first record), and
``load_workload``, the one entry point for a bundled trace name or a file of any format."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Callable

from specplan.errors import ConfigError, TraceError
from specplan.workloads.bundled import bundled_traces, get_bundled
from specplan.workloads.chat_templates import ChatTemplate
from specplan.workloads.datasets import (load_openai_requests, load_trtllm_bench, load_vllm_custom, load_vllm_sharegpt,
                                         load_vllm_sonnet)
from specplan.workloads.loaders import load_alpacaeval, load_chat, load_fastchat, load_prompt_response, load_wmt
from specplan.workloads.records import first_record
from specplan.workloads.request import Request
from specplan.workloads.timed import load_azure, load_mooncake
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
}
LENGTH_ONLY = ("azure", "mooncake")
#: Other names a user may give for a format.
FORMAT_ALIASES = {"specbench": "fastchat", "mtbench": "fastchat", "aider": "prompt-response", "openai": "chat", "sharegpt": "chat"}


def sniff_format(path: str | os.PathLike) -> str:
    """Tell a file's format from its name and first record; TraceError when it cannot."""
    path = Path(path)
    if path.name.endswith(".txt"):
        return "wmt"
    if path.name.endswith(".csv"):
        return "azure"
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


def load_file(path: str | os.PathLike, format: str | None = None, **options) -> list[Request]:
    """Load a trace file of any supported format (sniffed unless ``format`` is given)."""
    fmt = FORMAT_ALIASES.get(format, format) if format else sniff_format(path)
    if fmt not in FORMATS:
        raise ConfigError(f"format: unknown trace format {format!r}: choose one of {', '.join([*FORMATS, *FORMAT_ALIASES])}")
    if fmt == "tokens" and options:
        raise ConfigError(f"format: a token trace is already tokenized; {', '.join(options)} do not apply")
    if fmt in LENGTH_ONLY and options:
        raise ConfigError(f"format: a {fmt} trace holds lengths only; {', '.join(options)} do not apply")
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
) -> list[Request]:
    """Requests of a bundled trace (by name, see ``specplan workloads list``) or of a file.

    A path's format is sniffed from its name and first record unless ``format`` is given
    (:data:`FORMATS`, :data:`FORMAT_ALIASES`); ``tokenizer`` and ``template`` override the format's
    defaults for text traces. A model folder given as ``tokenizer`` without a ``template`` brings its
    own chat template (``specplan.workloads.model_folder``). Bundled traces are pre-tokenized and
    need no tokenizer.
    """
    spec = str(name_or_path)
    if spec in bundled_traces("workload") and format is None and tokenizer is None and template is None:
        return list(_bundled_requests(spec))
    path = Path(spec)
    if not path.exists():
        names = ", ".join(bundled_traces("workload")) or "none"
        raise TraceError(f"{spec}: no bundled trace of that name and no such file (bundled: {names})")
    if template is None and isinstance(tokenizer, (str, os.PathLike)) and (Path(tokenizer) / "tokenizer_config.json").is_file():
        from specplan.workloads.model_folder import model_folder

        folder = model_folder(str(tokenizer))
        tokenizer, template = folder.tokenizer, folder.template
    options = {k: v for k, v in (("tokenizer", tokenizer), ("template", template)) if v is not None}
    return load_file(path, format, **options)
