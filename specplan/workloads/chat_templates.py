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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from specplan.errors import ConfigError

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
