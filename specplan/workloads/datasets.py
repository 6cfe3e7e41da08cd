"""Benchmark datasets and production traces as requests.

Two kinds of data come in. **With responses** (a ShareGPT answer), the output tokens are the real
answer's, so the drafters replay exactly. **Prompt-only** (trtllm-bench's requested output lengths,
``vllm bench`` custom prompts, timestamped traces with lengths only) has no answer: its output
tokens are placeholders (``meta["prompt_only"]``) and a scenario must take acceptance from a
parametric or recorded source (``acceptance.mode`` ``alpha``, ``per_position``, ``length_dist`` or
``recorded``); ``drafter`` is refused for them.

==================  ====================================================================================
format              file
==================  ====================================================================================
``trtllm-bench``    JSON lines of ``InferenceRequest`` (``tensorrt_llm/bench/dataclasses/general.py``):
                    ``task_id``, ``output_tokens`` and ``input_ids`` (alias ``logits``) or ``prompt``;
                    a prompt is tokenized as ``trtllm-bench`` does, ``tokenizer(prompt)`` with the
                    tokenizer's special tokens (BOS), no chat template. Prompt-only.
``vllm-sharegpt``   ``vllm bench --dataset-name sharegpt`` (``vllm/benchmarks/datasets.py``,
                    ``ShareGPTDataset``): a JSON array of ``{"conversations": [...]}``, of which only
                    the first two turns are used: the first as the prompt (chat template applied, as
                    the chat endpoint does), the second as the answer. Exact replay.
``vllm-custom``     ``vllm bench --dataset-name custom`` (``CustomDataset``): JSON lines with ``prompt``,
                    chat template applied; ``output_tokens`` per line or the ``output_len`` option
                    (vLLM's ``--custom-output-len`` default 256). Prompt-only.
``openai-requests`` OpenAI chat-completion request bodies or Batch API lines (:func:`load_openai_requests`).
                    Prompt-only.
``vllm-sonnet``     ``vllm bench --dataset-name sonnet`` (``SonnetDataset``) over a poem-lines text file
                    (see :func:`load_vllm_sonnet`). Prompt-only.
==================  ====================================================================================

Timestamped traces: Azure LLM inference CSV and Mooncake JSONL in ``specplan.workloads.timed``, BurstGPT
CSV in ``specplan.workloads.burstgpt``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np

from specplan.errors import ConfigError, TraceError
from specplan.workloads.chat_templates import ChatTemplate
from specplan.workloads.records import Where, check_length, get_field, iter_records
from specplan.workloads.request import Request
from specplan.workloads.tokenization import HFTokenizer, Tokenizer

#: vLLM ``CustomDataset`` output length when the command line gives none (``--custom-output-len``).
VLLM_CUSTOM_OUTPUT_LEN = 256
PROMPT_ONLY_NOTE = ("prompt-only data (no responses): set acceptance.mode to alpha, per_position, length_dist "
                    "or recorded; the drafters have no answer to replay")


def prompt_only_request(rid: str, prompt_ids, output_len: int, **fields) -> Request:
    """A request whose output is ``output_len`` placeholder tokens (id 0), marked prompt-only."""
    meta = {"prompt_only": True, **fields.pop("meta", {})}
    return Request(rid, prompt_ids, np.zeros(output_len, dtype=np.int32), meta=meta, **fields)


def _folder(tokenizer, template, fmt: str) -> tuple[Tokenizer, ChatTemplate]:
    if tokenizer is None or template is None:
        raise ConfigError(f"format {fmt}: text prompts need the model's tokenizer and chat template; "
                          "set workload.tokenizer to the model folder")
    from specplan.workloads.chat_templates import get_template
    from specplan.workloads.tokenization import get_tokenizer

    return get_tokenizer(tokenizer), get_template(template)


def _ids(value, where: Where, field: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                           for t in value):
        raise where.error("must be a non-empty list of token ids >= 0", field)
    return value


def _positive(rec: dict, field: str, where: Where) -> int:
    return check_length(get_field(rec, field, int, where), f"{where.path}:{where.line}", field)


def load_trtllm_bench(path: str | os.PathLike, *, tokenizer=None, template=None) -> list[Request]:
    """A ``trtllm-bench`` dataset (``prepare_dataset.py`` output): one request per line."""
    path = Path(path)
    out = []
    for where, rec in iter_records(path):
        if not isinstance(rec, dict):
            raise where.error("expected an object with task_id, output_tokens and input_ids or prompt")
        tid = get_field(rec, "task_id", int, where)
        olen = _positive(rec, "output_tokens", where)
        ids_field = "input_ids" if "input_ids" in rec else "logits" if "logits" in rec else None
        if ids_field is not None:
            prompt = _ids(rec[ids_field], where, ids_field)
        elif isinstance(rec.get("prompt"), str):
            tok = tokenizer if isinstance(tokenizer, HFTokenizer) else None
            if tok is None:
                raise ConfigError(f"{path}: prompts as text need the model folder's tokenizer.json "
                                  "(workload.tokenizer), as trtllm-bench tokenizes them")
            prompt = tok.tok.encode(rec["prompt"], add_special_tokens=True).ids  # tokenizer(prompt): BOS added
        else:
            raise where.error("missing field 'input_ids' or 'prompt'")
        out.append(prompt_only_request(f"task-{tid}", prompt, olen))
    return _checked(out, path)


def load_vllm_sharegpt(path: str | os.PathLike, *, tokenizer=None, template=None) -> list[Request]:
    """``vllm bench`` ShareGPT: first turn as the prompt, second as the answer (exact replay).
    Conversations with fewer than two turns are skipped, as vLLM does."""
    path = Path(path)
    tok, tmpl = _folder(tokenizer, template, "vllm-sharegpt")
    eot = tok.token_id(tmpl.end_of_turn)
    out = []
    for where, rec in iter_records(path):
        conv = get_field(rec, "conversations", list, where) if isinstance(rec, dict) else None
        if conv is None:
            raise where.error("expected an object with 'conversations'")
        if len(conv) < 2:
            continue
        texts = []
        for i in (0, 1):
            if not isinstance(conv[i], dict) or not isinstance(conv[i].get("value"), str):
                raise where.error("must hold a string 'value'", f"conversations[{i}]")
            texts.append(conv[i]["value"])
        prompt = tok.encode_prompt(tmpl.render([("user", texts[0])], add_generation_prompt=True))
        answer = tok.encode(texts[1]) + [eot]
        rid = str(rec.get("id", f"line{where.line}"))
        out.append(Request(rid, prompt, answer))
    return _checked(out, path)


def load_vllm_custom(path: str | os.PathLike, *, tokenizer=None, template=None,
                     output_len: int = VLLM_CUSTOM_OUTPUT_LEN) -> list[Request]:
    """``vllm bench`` custom JSONL: ``{"prompt", "output_tokens"?}`` per line, chat template applied."""
    path = Path(path)
    check_option_int(output_len, "output_len", 1)
    tok, tmpl = _folder(tokenizer, template, "vllm-custom")
    out = []
    for where, rec in iter_records(path):
        text = get_field(rec, "prompt", str, where, nonempty=True) if isinstance(rec, dict) else None
        if text is None:
            raise where.error("expected an object with 'prompt'")
        olen = _positive(rec, "output_tokens", where) if "output_tokens" in rec else output_len
        prompt = tok.encode_prompt(tmpl.render([("user", text)], add_generation_prompt=True))
        out.append(prompt_only_request(str(rec.get("id", f"line{where.line}")), prompt, olen))
    return _checked(out, path)


def load_openai_requests(path: str | os.PathLike, *, tokenizer=None, template=None,
                         output_len: int = VLLM_CUSTOM_OUTPUT_LEN) -> list[Request]:
    """OpenAI chat-completion requests, one per line: a request body ``{"messages", "max_tokens"?}``
    or a Batch API line ``{"custom_id", "body": {...}}``. The messages (no answer) are the prompt,
    chat template applied; ``max_completion_tokens`` / ``max_tokens`` is the output length (else
    ``output_len``). Prompt-only: ask for the answers and use format ``chat`` for exact replay."""
    from specplan.workloads.loaders import _chat_messages

    path = Path(path)
    check_option_int(output_len, "output_len", 1)
    tok, tmpl = _folder(tokenizer, template, "openai-requests")
    out = []
    for where, rec in iter_records(path):
        body = rec.get("body", rec) if isinstance(rec, dict) else None
        if not isinstance(body, dict) or "messages" not in body:
            raise where.error("expected a request body with 'messages' (or a Batch API line with 'body')")
        messages = _chat_messages(body, where)
        if messages[-1][0] == "assistant":
            raise where.error("ends with an assistant message: a request asks for the next answer", "messages")
        olen = next((body[k] for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None), output_len)
        if not isinstance(olen, int) or isinstance(olen, bool) or olen < 1:
            raise where.error(f"must be an integer >= 1, got {olen!r}", "max_tokens")
        prompt = tok.encode_prompt(tmpl.render(messages, add_generation_prompt=True))
        rid = str(rec.get("custom_id", rec.get("id", f"line{where.line}")))
        out.append(prompt_only_request(rid, prompt, olen))
    return _checked(out, path)


#: ``vllm bench`` sonnet instruction (``SonnetDataset.sample``).
SONNET_BASE_PROMPT = "Pick as many lines as you can from these poem lines:\n"
#: Draws per kept prompt before an over-long ``input_len`` budget is refused rather than retried for ever.
SONNET_MAX_DRAWS = 100


def check_option_int(value, name: str, minimum: int) -> int:
    """A format option that must be an integer >= ``minimum``, else one ConfigError line naming it."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"workload.format_options.{name}: must be an integer >= {minimum}, got {value!r}")
    return value


def load_vllm_sonnet(path: str | os.PathLike, *, tokenizer=None, template=None, input_len: int = 550,
                     prefix_len: int = 200, output_len: int = 150, num_requests: int = 1000, seed: int = 0) -> list[Request]:
    """``vllm bench --dataset-name sonnet``: prompts of poem lines, drawn as ``SonnetDataset.sample``
    draws them. The first ``round((prefix_len - base) / avg)`` lines are a shared prefix, then
    ``random.choices`` adds lines up to ``round((input_len - base) / avg)`` (``base`` the templated
    instruction's length, ``avg`` the mean line length, both counted as ``tokenizer(text)`` counts,
    special tokens included); a draw whose templated prompt is longer than ``input_len`` is
    discarded. ``random`` is seeded with ``seed`` as ``vllm bench`` seeds it (``--seed``, default 0).
    Prompt-only, ``output_len`` tokens each. Defaults are ``vllm bench``'s (``--sonnet-input-len``
    550, ``--sonnet-prefix-len`` 200, ``--sonnet-output-len`` 150, ``--num-prompts`` 1000)."""
    path = Path(path)
    for name, value, minimum in (("input_len", input_len, 1), ("prefix_len", prefix_len, 0), ("output_len", output_len, 1),
                                 ("num_requests", num_requests, 1), ("seed", seed, 0)):
        check_option_int(value, name, minimum)
    tok, tmpl = _folder(tokenizer, template, "vllm-sonnet")
    if not isinstance(tok, HFTokenizer):
        raise ConfigError("format vllm-sonnet: needs the model folder's tokenizer.json (workload.tokenizer)")
    from specplan.workloads.records import read_text

    lines = read_text(path).splitlines(keepends=True)
    if not lines:
        raise TraceError(f"{path}: no poem lines")

    def count(text: str) -> int:  # tokenizer(text).input_ids: special tokens added
        return len(tok.tok.encode(text, add_special_tokens=True).ids)

    def templated(text: str) -> str:
        return tmpl.render([("user", text)], add_generation_prompt=True)

    avg = sum(count(line) for line in lines) / len(lines)
    base = count(templated(SONNET_BASE_PROMPT))
    if input_len <= base:
        raise ConfigError(f"workload.format_options.input_len: must exceed the vllm-sonnet base prompt's {base} tokens")
    n_input = round((input_len - base) / avg)
    prefix = lines[:max(round((prefix_len - base) / avg), 0)]
    rng = random.Random(seed)
    out: list[Request] = []
    draws = 0
    while len(out) < num_requests:
        draws += 1
        if draws > SONNET_MAX_DRAWS * num_requests:  # vLLM would loop for ever
            raise ConfigError(f"workload.format_options.input_len: {input_len} tokens is too tight for {path.name}'s lines "
                              f"(mean {avg:.1f} tokens): {draws - 1} draws kept {len(out)}; raise input_len")
        text = templated(SONNET_BASE_PROMPT + "".join(prefix + rng.choices(lines, k=n_input - len(prefix))))
        if count(text) <= input_len:
            out.append(prompt_only_request(f"sonnet-{len(out)}", tok.encode_prompt(text), output_len))
    return out


def _checked(requests: list[Request], path: Path) -> list[Request]:
    if not requests:
        raise TraceError(f"{path}: no requests in the file")
    seen = set()
    for r in requests:
        if r.id in seen:
            raise TraceError(f"{path}: duplicate request id '{r.id}'")
        seen.add(r.id)
    return requests


def check_acceptance_source(requests, mode: str) -> None:
    """Refuse exact drafter replay over placeholder outputs (prompt-only data), naming the fix."""
    if mode == "drafter" and any(r.meta.get("prompt_only") for r in requests):
        raise ConfigError(f"acceptance.mode: {PROMPT_ONLY_NOTE}")
