"""Loaders: text traces (prompts with the responses a model gave) into :class:`Request` lists.

Every source is first read as conversations, then :func:`conversation_requests` turns each
assistant message into one request: its prompt is the chat template applied to all earlier turns and
answers (as the engine saw it), its output the answer's tokens plus the end-of-turn id when the
model stopped on its own. Formats:

========================  ===================================================  ===================
format                    file                                                 defaults
========================  ===================================================  ===================
``tokens``                token trace JSONL (``specplan.workloads.tokentrace``)  —
``fastchat``              Spec-Bench / MT-bench answer JSONL + ``question.jsonl``  llama2, vicuna
``alpacaeval``            AlpacaEval ``model_outputs.json``                    llama3, llama-3
``prompt-response``       JSONL ``{"id", "prompt", "response"}`` (aider)       llama3, llama-3
``wmt``                   WMT ``{pair}.{system}.txt`` + ``{pair}.src.txt``     llama3, llama-3
``chat``                  JSONL/JSON ``messages`` (OpenAI) or ``conversations`` (ShareGPT)  llama3, llama-3
========================  ===================================================  ===================

Benchmark datasets and production traces (``trtllm-bench``, ``vllm-sharegpt``, ``vllm-custom``,
``vllm-sonnet``, ``openai-requests``, ``azure``, ``mooncake``, ``burstgpt``) load through ``specplan.workloads.datasets``,
``specplan.workloads.timed`` and ``specplan.workloads.burstgpt``.

Loaders build the whole list before returning; any malformed record raises TraceError naming the
file, line and field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

from specplan.errors import ConfigError, TraceError
from specplan.workloads.chat_templates import ChatTemplate, Message, get_template
from specplan.workloads.records import Where, check_value, get_field, iter_records, read_text
from specplan.workloads.request import Request
from specplan.workloads.tokenization import Tokenizer, get_tokenizer

#: Output length limit of the FastChat / Spec-Bench generation scripts (``max_new_tokens``).
FASTCHAT_MAX_NEW_TOKENS = 1024

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "system": "system"}
_OPENAI_ROLES = {"system": "system", "user": "user", "assistant": "assistant"}
_LANGUAGES = {"en": "English", "de": "German", "zh": "Chinese", "ja": "Japanese", "cs": "Czech", "ru": "Russian",
              "uk": "Ukrainian", "es": "Spanish", "hi": "Hindi", "is": "Icelandic", "fr": "French"}

#: Prompt of the ``wmt`` loader. The WMT24 repository does not record the prompt its Llama3-70B run
#: used; this one-segment instruction is an assumption.
WMT_INSTRUCTION = "Translate the following text from {source_language} into {target_language}. Reply with the translation only.\n\n{text}"


def conversation_requests(
    messages: Sequence[Message],
    *,
    tokenizer: Tokenizer,
    template: ChatTemplate,
    where: Where,
    request_id: Callable[[int], str],
    session: str | None = None,
    category: str | None = None,
    ended: Callable[[int, list[int]], bool] | None = None,
    meta: Callable[[int], dict] | None = None,
) -> list[Request]:
    """One request per assistant message of a conversation.

    Turn t's prompt is ``template.render(messages before it)`` tokenized as a prompt; its output is
    the answer's tokens, plus the template's end-of-turn id if ``ended(t, answer_ids)`` (default:
    always). ``request_id(t)`` names turn t's request.
    """
    eot = tokenizer.token_id(template.end_of_turn)
    requests = []
    turn = 0
    for i, (role, content) in enumerate(messages):
        if role != "assistant":
            continue
        try:
            prompt_text = template.render(messages[:i], add_generation_prompt=True)
        except ConfigError as exc:
            raise where.error(f"cannot be rendered: {exc}", "messages") from None
        output = tokenizer.encode(content)
        if ended is None or ended(turn, output):
            output = output + [eot]
        requests.append(
            Request(
                id=request_id(turn),
                prompt_ids=tokenizer.encode_prompt(prompt_text),
                output_ids=output,
                category=category,
                session=session,
                turn=turn,
                meta=meta(turn) if meta else {},
            )
        )
        turn += 1
    if not requests:
        raise where.error("the conversation holds no assistant answer")
    return requests


def _unique(requests: list[Request], path: Path) -> list[Request]:
    seen: set[str] = set()
    for req in requests:
        if req.id in seen:
            raise TraceError(f"{path}: duplicate request id '{req.id}'")
        seen.add(req.id)
    if not requests:
        raise TraceError(f"{path}: the file holds no requests")
    return requests


def _record_id(obj: dict, where: Where, field: str) -> str:
    if obj.get(field) is None:
        return f"line{where.line}"
    return str(check_value(obj[field], (str, int), where, field))


def _turn_list(obj: dict, field: str, where: Where, label: str | None = None, nonempty_items: bool = False) -> list[str]:
    label = label or field
    turns = get_field(obj, field, list, where, nonempty=True, label=label)
    return [check_value(t, str, where, f"{label}[{i}]", nonempty=nonempty_items) for i, t in enumerate(turns)]


def find_questions(answers: Path) -> Path:
    """``question.jsonl`` beside an answer file or one folder up (Spec-Bench and FastChat layouts)."""
    for folder in (answers.parent, answers.parent.parent):
        if (folder / "question.jsonl").is_file():
            return folder / "question.jsonl"
    raise TraceError(f"{answers}: no question.jsonl beside it or one folder up; pass questions=")


def load_fastchat(
    answers: str | os.PathLike,
    questions: str | os.PathLike | None = None,
    *,
    tokenizer: "str | Tokenizer" = "llama2",
    template: "str | ChatTemplate" = "vicuna",
    max_new_tokens: int = FASTCHAT_MAX_NEW_TOKENS,
) -> list[Request]:
    """Spec-Bench or MT-bench: a FastChat ``llm_judge`` answer file joined to its questions.

    Each question is a session (``session`` = question id; request ids ``"{qid}-{turn}"``); turn n's
    prompt holds the earlier questions and the model's own earlier answers. The end-of-turn token is
    appended unless the turn hit ``max_new_tokens``: by the recorded ``new_tokens`` where the file has
    them (Spec-Bench), else by the re-encoded length (MT-bench). ``meta["new_tokens"]`` keeps the
    recorded count.
    """
    answers = Path(answers)
    questions = Path(questions) if questions is not None else find_questions(answers)
    tok, tmpl = get_tokenizer(tokenizer), get_template(template)
    by_id: dict[int, tuple[Where, dict]] = {}
    for where, q in iter_records(questions):
        qid = get_field(q, "question_id", int, where)
        if qid in by_id:
            raise where.error(f"duplicate question id {qid}", "question_id")
        by_id[qid] = (where, q)
    requests: list[Request] = []
    for where, a in iter_records(answers):
        qid = get_field(a, "question_id", int, where)
        if qid not in by_id:
            raise where.error(f"question id {qid} is not in {questions}", "question_id")
        qwhere, q = by_id[qid]
        asked = _turn_list(q, "turns", qwhere)
        choices = get_field(a, "choices", list, where, nonempty=True)
        choice = check_value(choices[0], dict, where, "choices[0]")
        answered = _turn_list(choice, "turns", where, label="choices[0].turns", nonempty_items=True)
        if len(answered) != len(asked):
            raise where.error(f"has {len(answered)} answers for the {len(asked)} turns of question {qid}", "choices[0].turns")
        new_tokens = None
        if choice.get("new_tokens") is not None:
            new_tokens = get_field(choice, "new_tokens", list, where, label="choices[0].new_tokens")
            if len(new_tokens) != len(answered) or not all(isinstance(n, int) and not isinstance(n, bool) for n in new_tokens):
                raise where.error("must hold one integer per turn", "choices[0].new_tokens")

        def ended(turn: int, ids: list[int], new_tokens=new_tokens) -> bool:
            return (new_tokens[turn] if new_tokens else len(ids)) < max_new_tokens

        messages: list[Message] = []
        for question, answer in zip(asked, answered):
            messages += [("user", question), ("assistant", answer)]
        category = q.get("category") if isinstance(q.get("category"), str) else None
        requests += conversation_requests(
            messages,
            tokenizer=tok,
            template=tmpl,
            where=where,
            request_id=lambda t, qid=qid: f"{qid}-{t}",
            session=str(qid),
            category=category,
            ended=ended,
            meta=(lambda t, nt=new_tokens: {"new_tokens": nt[t]}) if new_tokens else None,
        )
    return _unique(requests, answers)


def load_alpacaeval(path: str | os.PathLike, *, tokenizer: "str | Tokenizer" = "llama3", template: "str | ChatTemplate" = "llama-3") -> list[Request]:
    """AlpacaEval ``model_outputs.json``: one list of ``{"instruction", "output", "dataset"}``.

    The instruction is the single user message; ids are ``"alpacaeval-{index}"`` (0-based, file
    order); the category is ``dataset``. Outputs get the end-of-turn token (they were complete).
    """
    path = Path(path)
    tok, tmpl = get_tokenizer(tokenizer), get_template(template)
    requests: list[Request] = []
    for index, (where, rec) in enumerate(iter_records(path)):
        instruction = get_field(rec, "instruction", str, where, nonempty=True)
        output = get_field(rec, "output", str, where, nonempty=True)
        category = get_field(rec, "dataset", str, where) if rec.get("dataset") is not None else None
        requests += conversation_requests(
            [("user", instruction), ("assistant", output)], tokenizer=tok, template=tmpl, where=where,
            request_id=lambda t, index=index: f"alpacaeval-{index}", category=category,
        )
    return _unique(requests, path)


def load_prompt_response(
    path: str | os.PathLike,
    *,
    tokenizer: "str | Tokenizer" = "llama3",
    template: "str | ChatTemplate" = "llama-3",
    category: str | None = None,
) -> list[Request]:
    """JSON lines ``{"id", "prompt", "response", "category"?}`` (the aider exchanges): single turns,
    the prompt as the one user message. ``category`` fills records that carry none."""
    path = Path(path)
    tok, tmpl = get_tokenizer(tokenizer), get_template(template)
    requests: list[Request] = []
    for where, rec in iter_records(path):
        prompt = get_field(rec, "prompt", str, where, nonempty=True)
        response = get_field(rec, "response", str, where, nonempty=True)
        rid = _record_id(rec, where, "id")
        cat = get_field(rec, "category", str, where) if rec.get("category") is not None else category
        requests += conversation_requests(
            [("user", prompt), ("assistant", response)], tokenizer=tok, template=tmpl, where=where,
            request_id=lambda t, rid=rid: rid, category=cat,
        )
    return _unique(requests, path)


def _lines(path: Path) -> list[str]:
    text = read_text(path)
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def load_wmt(
    output: str | os.PathLike,
    source: str | os.PathLike | None = None,
    docs: str | os.PathLike | None = None,
    *,
    tokenizer: "str | Tokenizer" = "llama3",
    template: "str | ChatTemplate" = "llama-3",
    instruction: str = WMT_INSTRUCTION,
) -> list[Request]:
    """WMT ``txt`` layout: a system's output file, aligned line by line with the source.

    For ``{pair}.{system}.txt`` the source defaults to ``{pair}.src.txt`` and the documents file to
    ``{pair}.docs`` (``domain<TAB>doc_id``; optional) in the same folder. Each line is one
    single-turn request with the id ``"{pair}-{line}"``, prompt ``instruction`` (assumed, see
    :data:`WMT_INSTRUCTION`) and category the domain (``translation`` without a documents file).
    The canary line (domain ``canary``, or a source starting ``CANARY GUID``) is skipped.
    """
    output = Path(output)
    pair = output.name.split(".")[0]
    source = Path(source) if source is not None else output.with_name(f"{pair}.src.txt")
    docs_path = Path(docs) if docs is not None else output.with_name(f"{pair}.docs")
    src_lines, out_lines = _lines(source), _lines(output)
    domains = [line.split("\t")[0] for line in _lines(docs_path)] if (docs is not None or docs_path.is_file()) else None
    for other, lines in ((source, src_lines), (docs_path, domains)):
        if lines is not None and len(lines) != len(out_lines):
            raise TraceError(f"{other}: {len(lines)} lines, but {output} has {len(out_lines)}; the files must be aligned line by line")
    src_code, _, tgt_code = pair.partition("-")
    languages = {"source_language": _LANGUAGES.get(src_code, src_code), "target_language": _LANGUAGES.get(tgt_code, tgt_code)}
    tok, tmpl = get_tokenizer(tokenizer), get_template(template)
    requests: list[Request] = []
    for i, (src, out) in enumerate(zip(src_lines, out_lines)):
        domain = domains[i] if domains else "translation"
        if domain == "canary" or src.startswith("CANARY GUID"):
            continue
        where = Where(output, i + 1)
        check_value(src, str, Where(source, i + 1), "source line", nonempty=True)
        check_value(out, str, where, "output line", nonempty=True)
        requests += conversation_requests(
            [("user", instruction.format(text=src, **languages)), ("assistant", out)], tokenizer=tok, template=tmpl,
            where=where, request_id=lambda t, i=i: f"{pair}-{i + 1}", category=domain,
        )
    return _unique(requests, output)


def _chat_messages(rec: dict, where: Where) -> list[Message]:
    if "messages" in rec:
        field, role_key, text_key, roles = "messages", "role", "content", _OPENAI_ROLES
    else:
        field, role_key, text_key, roles = "conversations", "from", "value", _SHAREGPT_ROLES
    raw = get_field(rec, field, list, where, nonempty=True)
    messages: list[Message] = []
    for i, m in enumerate(raw):
        m = check_value(m, dict, where, f"{field}[{i}]")
        role = get_field(m, role_key, str, where, label=f"{field}[{i}].{role_key}")
        if role not in roles:
            raise where.error(f"unknown role '{role}' (expected one of {', '.join(sorted(roles))})", f"{field}[{i}].{role_key}")
        content = get_field(m, text_key, str, where, label=f"{field}[{i}].{text_key}", nonempty=roles[role] == "assistant")
        messages.append((roles[role], content))
    return messages


def load_chat(path: str | os.PathLike, *, tokenizer: "str | Tokenizer" = "llama3", template: "str | ChatTemplate" = "llama-3") -> list[Request]:
    """Chat logs, one conversation per record: OpenAI style ``{"id"?, "messages": [{"role",
    "content"}]}`` or ShareGPT style ``{"id"?, "conversations": [{"from", "value"}]}``, as JSON lines or
    one JSON array. Each conversation is a session (its ``id``, else ``line{N}``); every assistant
    message is one request with id ``"{session}-{turn}"``. ``category`` is taken when present."""
    path = Path(path)
    tok, tmpl = get_tokenizer(tokenizer), get_template(template)
    requests: list[Request] = []
    for where, rec in iter_records(path):
        if not isinstance(rec, dict) or not ("messages" in rec or "conversations" in rec):
            raise where.error("missing field 'messages' (OpenAI style) or 'conversations' (ShareGPT style)")
        session = _record_id(rec, where, "id")
        category = get_field(rec, "category", str, where) if rec.get("category") is not None else None
        requests += conversation_requests(
            _chat_messages(rec, where), tokenizer=tok, template=tmpl, where=where,
            request_id=lambda t, s=session: f"{s}-{t}", session=session, category=category,
        )
    return _unique(requests, path)
