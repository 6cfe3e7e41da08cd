"""The operator's model folder as tokenizer and chat template (``workload.tokenizer: PATH``).

A HuggingFace model folder holds ``tokenizer.json`` and ``tokenizer_config.json``, whose
``chat_template`` (a Jinja string, or a list of ``{"name", "template"}`` of which ``default`` is
used) is what the engines' chat endpoints render. It is rendered here the way transformers'
``apply_chat_template`` does (``transformers/utils/chat_template_utils.py``,
``_compile_jinja_template``): a Jinja ``ImmutableSandboxedEnvironment`` with ``trim_blocks``,
``lstrip_blocks`` and the ``loopcontrols`` extension, a ``tojson`` filter that keeps non-ASCII text,
the globals ``raise_exception`` and ``strftime_now``, and the variables ``messages``,
``add_generation_prompt`` and the special tokens (``bos_token``, ``eos_token``, ...). The rendered
string is tokenized with ``add_special_tokens=False``, as ``apply_chat_template(tokenize=True)``
does: the template writes BOS itself. The end-of-turn token appended to answers that ended on their
own is the folder's ``eos_token``. Files are read through ``read_checked`` (size, UTF-8) and the
template rendered under ``chat_templates.compile_jinja``'s limits, so a broken folder is one line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from specplan.errors import ConfigError, read_checked
from specplan.workloads.chat_templates import ChatTemplate, Message, compile_jinja
from specplan.workloads.tokenization import HFTokenizer

_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def _token_text(value, where: str) -> str | None:
    """A special token as tokenizer_config.json spells it: a string or an AddedToken ``{"content": ...}``."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise ConfigError(f"{where}: expected a token string or {{\"content\": ...}}, got {value!r}")


def _template_source(config: dict, where: str) -> str:
    tmpl = config.get("chat_template")
    if isinstance(tmpl, list):  # named templates: the default one, as transformers picks it
        named = {t.get("name"): t.get("template") for t in tmpl if isinstance(t, dict)}
        tmpl = named.get("default")
    if not isinstance(tmpl, str) or not tmpl:
        raise ConfigError(f"{where}: chat_template: missing (the model folder needs a chat template; "
                          "a chat_template.jinja file next to it is read too)")
    return tmpl


class ModelFolder:
    """``tokenizer.json`` + the chat template and special tokens of ``tokenizer_config.json``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        where = f"workload.tokenizer: {self.path}"
        if not (self.path / "tokenizer.json").is_file() or not (self.path / "tokenizer_config.json").is_file():
            raise ConfigError(f"{where}: a model folder needs tokenizer.json and tokenizer_config.json")
        try:
            config = json.loads(read_checked(self.path / "tokenizer_config.json", "workload.tokenizer: "))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}/tokenizer_config.json:{exc.lineno}: invalid JSON ({exc.msg})") from None
        except RecursionError:
            raise ConfigError(f"{where}/tokenizer_config.json: invalid JSON (nested too deeply)") from None
        if not isinstance(config, dict):
            raise ConfigError(f"{where}/tokenizer_config.json: expected a JSON object of tokenizer settings, "
                              f"got {type(config).__name__}")
        jinja_file = self.path / "chat_template.jinja"  # newer folders keep the template in its own file
        source = (read_checked(jinja_file, "workload.tokenizer: ") if jinja_file.is_file()
                  else _template_source(config, f"{where}/tokenizer_config.json"))
        self.special_tokens = {k: _token_text(config.get(k), f"{where}/tokenizer_config.json: {k}") for k in _SPECIAL_KEYS}
        self.special_tokens = {k: v for k, v in self.special_tokens.items() if v is not None}
        if "eos_token" not in self.special_tokens:
            raise ConfigError(f"{where}/tokenizer_config.json: eos_token: missing (the end-of-turn token of answers)")
        self.tokenizer = HFTokenizer(self.path / "tokenizer.json", name=str(self.path))
        self._render = compile_jinja(source, where)

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        """The prompt string, as ``apply_chat_template(messages, tokenize=False)`` gives it."""
        return self._render(messages=[{"role": r, "content": c} for r, c in messages],
                            add_generation_prompt=add_generation_prompt, **self.special_tokens)

    def encode_chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        """Prompt ids, as ``apply_chat_template(messages, tokenize=True)`` gives them."""
        return self.tokenizer.encode_prompt(self.render(messages, add_generation_prompt))

    @property
    def template(self) -> ChatTemplate:
        """The folder's template in the loaders' interface (end of turn: the folder's eos_token)."""
        return ChatTemplate(str(self.path), self.special_tokens["eos_token"], self.render)


@lru_cache(maxsize=8)
def model_folder(path: str) -> ModelFolder:
    """A model folder, read once per process."""
    return ModelFolder(path)


def workload_options(tokenizer: str | None, trace: str) -> dict:
    """``tokenizer=`` / ``template=`` for :func:`specplan.workloads.formats.load_workload` from
    ``workload.tokenizer`` (nothing when unset: the format's defaults)."""
    from specplan.workloads.bundled import bundled_traces

    if tokenizer is None:
        return {}
    if trace in bundled_traces("workload"):
        raise ConfigError(f"workload.tokenizer: trace {trace!r} is bundled and already tokenized; "
                          "give a text trace file, or drop workload.tokenizer")
    folder = model_folder(str(tokenizer))
    return {"tokenizer": folder.tokenizer, "template": folder.template}
