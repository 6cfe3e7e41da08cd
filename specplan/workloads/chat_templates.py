"""Chat templates: a conversation rendered to the prompt string an engine tokenizes.

Each template writes its own BOS string, so ``Tokenizer.encode_prompt(template.render(...))`` gives
the prompt ids exactly. A template also names the end-of-turn token the model emits after an
answer; loaders append its id to responses that ended on their own.

- ``vicuna`` (``vicuna_v1.1``): FastChat ``get_conversation_template("vicuna")``, separator style
  ADD_COLON_TWO: ``SYSTEM USER: q1 ASSISTANT: a1</s>USER: q2 ASSISTANT:``.
- ``llama-2``: the Llama-2-chat format of Meta's reference code and HuggingFace's template:
  ``<s>[INST] <<SYS>>\\n{system}\\n<</SYS>>\\n\\n{q1} [/INST] {a1} </s><s>[INST] {q2} [/INST]``.
- ``llama-3``: ``llama_models.llama3.chat_format.ChatFormat`` (content verbatim, not stripped).
- ``chatml``: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` ... ``<|im_start|>assistant\\n``.

A model folder's own Jinja template (``specplan.workloads.model_folder``) is compiled here by
:func:`compile_jinja`: in Jinja's immutable sandbox, with limits on what one render may build
(``MAX_RENDER_CHARS``) and loop over (``MAX_RANGE_ITEMS``), and any error it raises, Jinja's or
Python's (a division by zero, the sandbox's range limit), named in one ConfigError line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Sequence

from specplan.errors import ConfigError, one_line

#: One message: ``(role, content)`` with role ``system``, ``user`` or ``assistant``.
Message = tuple[str, str]

VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


def _split_system(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    if messages and messages[0][0] == "system":
        return messages[0][1], list(messages[1:])
    return None, list(messages)


def _vicuna(messages: Sequence[Message], add_generation_prompt: bool) -> str:
    system, rest = _split_system(messages)
    roles = {"user": "USER", "assistant": "ASSISTANT"}
    seps = (" ", "</s>")
    out = "<s>" + (VICUNA_SYSTEM if system is None else system) + seps[0]
    for i, (role, content) in enumerate(rest):
        out += f"{roles[role]}: {content}{seps[i % 2]}"
    if add_generation_prompt:
        out += "ASSISTANT:"
    return out


def _llama2(messages: Sequence[Message], add_generation_prompt: bool) -> str:
    system, rest = _split_system(messages)
    out = ""
    for i, (role, content) in enumerate(rest):
        if role == "user":
            if i == 0 and system is not None:
                content = f"<<SYS>>\n{system}\n<</SYS>>\n\n{content}"
            out += f"<s>[INST] {content.strip()} [/INST]"
        else:
            out += f" {content.strip()} </s>"
    return out


def _llama3(messages: Sequence[Message], add_generation_prompt: bool) -> str:
    out = "<|begin_of_text|>"
    for role, content in messages:
        out += f"<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"
    if add_generation_prompt:
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n"
    return out


def _chatml(messages: Sequence[Message], add_generation_prompt: bool) -> str:
    out = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)
    if add_generation_prompt:
        out += "<|im_start|>assistant\n"
    return out


@dataclass(frozen=True)
class ChatTemplate:
    """A named template: ``render(messages, add_generation_prompt)`` and the end-of-turn token."""

    name: str
    end_of_turn: str
    _render: Callable[[Sequence[Message], bool], str]

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        """The prompt string for ``messages``; with ``add_generation_prompt`` it ends where the
        assistant's next answer begins (the llama-2 format needs nothing added there). Messages must
        alternate user, assistant, ... after an optional leading system message."""
        _, rest = _split_system(messages)
        for i, (role, _) in enumerate(rest):
            expected = "user" if i % 2 == 0 else "assistant"
            if role != expected:
                raise ConfigError(f"chat template '{self.name}': message {i} has role '{role}', expected '{expected}'")
        return self._render(messages, add_generation_prompt)


TEMPLATES: dict[str, ChatTemplate] = {
    t.name: t
    for t in (
        ChatTemplate("vicuna", "</s>", _vicuna),
        ChatTemplate("llama-2", "</s>", _llama2),
        ChatTemplate("llama-3", "<|eot_id|>", _llama3),
        ChatTemplate("chatml", "<|im_end|>", _chatml),
    )
}
_ALIASES = {"vicuna_v1.1": "vicuna", "llama2": "llama-2", "llama3": "llama-3"}


def get_template(name: "str | ChatTemplate") -> ChatTemplate:
    """A template by name (``vicuna``/``vicuna_v1.1``, ``llama-2``, ``llama-3``, ``chatml``)."""
    if isinstance(name, ChatTemplate):
        return name
    key = _ALIASES.get(name, name)
    if key not in TEMPLATES:
        raise ConfigError(f"template: unknown chat template {name!r}: choose one of {', '.join(TEMPLATES)}")
    return TEMPLATES[key]


#: The most characters one render of a folder's template may produce or build on the way (a string,
#: list or repeat count): a real prompt is far shorter than a model's context in characters, and a
#: template that builds 100 MB is broken or hostile.
MAX_RENDER_CHARS = 16 * 1024 * 1024
#: The most items of ``range`` one render may loop over, all ranges together: chat templates loop
#: over the messages; nested ranges under the sandbox's own per-range limit could still spin for hours.
MAX_RANGE_ITEMS = 1_000_000


def _sized(x) -> int:
    """What a value costs against MAX_RENDER_CHARS: a string's or list's length, an integer itself
    (a repeat count or a width)."""
    if isinstance(x, bool):
        return 0
    if isinstance(x, int):
        return abs(x)
    if isinstance(x, (str, bytes, list, tuple, dict)):
        return len(x)
    return 0


def _args_checked(f, check):
    def checked(value, *args, **kwargs):
        check(*args, *kwargs.values())
        return f(value, *args, **kwargs)
    return checked


def _limited_environment(where: str):
    """transformers' sandbox (``_compile_jinja_template``) with the render limits above."""
    try:
        from jinja2.compiler import CodeGenerator
        from jinja2.exceptions import SecurityError, TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ConfigError(f"{where}: the Python package 'jinja2' is not installed (pip install jinja2)") from None

    def check(*values) -> None:
        if any(_sized(v) > MAX_RENDER_CHARS for v in values):
            raise SecurityError(f"builds more than {MAX_RENDER_CHARS} characters (a render's limit)")

    class CheckedConcat(CodeGenerator):
        """``a ~ b`` is no binop the sandbox intercepts: compiled to a join that checks its size first."""

        def visit_Concat(self, node, frame) -> None:
            self.write("environment.checked_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class Limited(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+"})
        code_generator_class = CheckedConcat
        range_items = 0  # reset by each render

        def checked_concat(self, parts) -> str:
            parts = [str(p) for p in parts]
            check(sum(len(p) for p in parts))
            return "".join(parts)

        def call_binop(self, context, operator, left, right):
            if operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
                check(right * abs(left).bit_length() // 8)  # the result's bytes, before computing it
            elif operator == "*" and isinstance(right, int) and isinstance(left, (str, list, tuple)):
                check(len(left) * right)
            elif operator == "*" and isinstance(left, int) and isinstance(right, (str, list, tuple)):
                check(left * len(right))
            elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                check(len(left) + len(right))
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's own signature)
            check(*args, *kwargs.values())  # str.ljust(10**9), a macro handed a doubled string
            out = super().call(__context, __obj, *args, **kwargs)
            if isinstance(out, range):
                __self.range_items += len(out)
                if __self.range_items > MAX_RANGE_ITEMS:
                    raise SecurityError(f"loops over more than {MAX_RANGE_ITEMS} range items (a render's limit)")
            return out

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = Limited(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    for name in ("center", "indent"):  # filters are no sandbox calls: those taking a width are checked here
        env.filters[name] = _args_checked(env.filters[name], check)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env, TemplateError


def compile_jinja(source: str, where: str) -> Callable[..., str]:
    """A Jinja chat template as ``render(**variables) -> str`` under the limits above; ``where``
    (the option and file) starts every error line."""
    env, template_error = _limited_environment(where)
    try:
        compiled = env.from_string(source)
    except template_error as exc:
        raise ConfigError(f"{where}: chat_template does not compile ({one_line(exc)})") from None
    except (MemoryError, RecursionError) as exc:  # a template nested beyond the parser
        raise ConfigError(f"{where}: chat_template does not compile ({type(exc).__name__})") from None

    def render(**variables) -> str:
        env.range_items = 0
        out, size = [], 0
        try:
            for piece in compiled.generate(**variables):
                size += len(piece)
                if size > MAX_RENDER_CHARS:
                    raise ConfigError(f"{where}: chat_template renders more than {MAX_RENDER_CHARS} characters "
                                      "(a render's limit); fix the template")
                out.append(piece)
        except ConfigError:
            raise
        except template_error as exc:
            raise ConfigError(f"{where}: chat_template: {one_line(exc)}") from None
        except Exception as exc:  # the template is the user's code: any error it raises is input, named
            detail = one_line(exc)
            raise ConfigError(f"{where}: chat_template raised {type(exc).__name__}"
                              f"{': ' + detail if detail else ''}; fix the template") from None
        return "".join(out)

    return render
