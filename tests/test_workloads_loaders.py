"""Loaders: expected token ids computed directly with the tokenizer libraries, round trips through
token traces, bundled traces against their recorded counts, and malformed input."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from llama_models.datatypes import RawMessage
from llama_models.llama3.chat_format import ChatFormat
from llama_models.llama3.tokenizer import Tokenizer as Llama3
from typer.testing import CliRunner

from specplan.errors import ConfigError, TraceError
from specplan.workloads.bundled import bundled_traces
from specplan.workloads.loaders import (
    load_alpacaeval,
    load_chat,
    load_fastchat,
    load_prompt_response,
    load_wmt,
)
from specplan.workloads.formats import load_workload, sniff_format
from specplan.workloads.tokenization import bundled_llama2_path
from specplan.workloads.tokentrace import read_token_trace, write_token_trace

DATA = Path(__file__).parent / "data" / "workloads"
VICUNA_SYS = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
              "detailed, and polite answers to the user's questions.")
EOT = 128009


@pytest.fixture(scope="module")
def sp():
    return spm.SentencePieceProcessor(model_proto=gzip.decompress(bundled_llama2_path().read_bytes()))


@pytest.fixture(scope="module")
def l3():
    return Llama3.get_instance()


def dialog(l3, *messages):
    """Prompt ids per llama_models' own ChatFormat (the reference the llama-3 template must match)."""
    return ChatFormat(l3).encode_dialog_prompt([RawMessage(role=r, content=c) for r, c in messages]).tokens


def enc(l3, text):
    return l3.encode(text, bos=False, eos=False)


def assert_round_trip(requests, tmp_path):
    path = write_token_trace(requests, tmp_path / "trace.jsonl.gz")
    back = load_workload(path)
    assert len(back) == len(requests) and all(a.same_as(b) for a, b in zip(requests, back))


def test_fastchat_fixture(sp, tmp_path):
    reqs = load_fastchat(DATA / "fastchat" / "model_answer" / "fixture.jsonl")  # question.jsonl one folder up
    q = [json.loads(x) for x in (DATA / "fastchat" / "question.jsonl").read_text().splitlines()]
    a = [json.loads(x)["choices"][0] for x in (DATA / "fastchat" / "model_answer" / "fixture.jsonl").read_text().splitlines()]
    assert [r.id for r in reqs] == ["1-0", "1-1", "2-0", "3-0"]
    assert [(r.session, r.turn, r.category) for r in reqs] == [("1", 0, "writing"), ("1", 1, "writing"), ("2", 0, "translation"), ("3", 0, "qa")]
    q1, q2 = q[0]["turns"]
    a1, a2 = a[0]["turns"]
    # Legacy LlamaTokenizer: BOS, then each piece between </s> encoded on its own.
    assert reqs[0].prompt_ids.tolist() == [1] + sp.encode(f"{VICUNA_SYS} USER: {q1} ASSISTANT:")
    assert reqs[1].prompt_ids.tolist() == [1] + sp.encode(f"{VICUNA_SYS} USER: {q1} ASSISTANT: {a1}") + [2] + sp.encode(f"USER: {q2} ASSISTANT:")
    assert reqs[0].output_ids.tolist() == sp.encode(a1) + [2]
    assert reqs[1].output_ids.tolist() == sp.encode(a2) + [2]
    # Question 3 recorded new_tokens = 1024: it hit the limit, so no EOS.
    assert reqs[3].output_ids.tolist() == sp.encode(a[2]["turns"][0])
    assert [r.meta["new_tokens"] for r in reqs] == [30, 25, 9, 1024]
    assert_round_trip(reqs, tmp_path)


def test_alpacaeval_fixture(l3, tmp_path):
    reqs = load_alpacaeval(DATA / "alpacaeval.json")
    rows = json.loads((DATA / "alpacaeval.json").read_text())
    assert [(r.id, r.category, r.session) for r in reqs] == [("alpacaeval-0", "helpful_base", None), ("alpacaeval-1", "oasst", None)]
    for r, row in zip(reqs, rows):
        assert r.prompt_ids.tolist() == dialog(l3, ("user", row["instruction"]))
        assert r.output_ids.tolist() == enc(l3, row["output"]) + [EOT]
    assert_round_trip(reqs, tmp_path)


def test_prompt_response_fixture(l3, tmp_path):
    reqs = load_prompt_response(DATA / "prompt_response.jsonl", category="code_editing")
    rows = [json.loads(x) for x in (DATA / "prompt_response.jsonl").read_text().splitlines()]
    assert [(r.id, r.category) for r in reqs] == [("ex-1", "code_editing"), ("ex-2", "docs")]
    for r, row in zip(reqs, rows):
        assert r.prompt_ids.tolist() == dialog(l3, ("user", row["prompt"]))
        assert r.output_ids.tolist() == enc(l3, row["response"]) + [EOT]
    assert_round_trip(reqs, tmp_path)


def test_wmt_fixture(l3, tmp_path):
    reqs = load_wmt(DATA / "wmt" / "en-de.Sys.txt")  # source and docs found beside it; canary skipped
    assert [(r.id, r.category) for r in reqs] == [("en-de-2", "news"), ("en-de-3", "social")]
    prompt = "Translate the following text from English into German. Reply with the translation only.\n\nThe cat sleeps."
    assert reqs[0].prompt_ids.tolist() == dialog(l3, ("user", prompt))
    assert reqs[0].output_ids.tolist() == enc(l3, "Die Katze schläft.") + [EOT]
    assert_round_trip(reqs, tmp_path)


def test_chat_openai_fixture(l3, tmp_path):
    reqs = load_chat(DATA / "chat_openai.jsonl")
    assert [(r.id, r.session, r.turn, r.category) for r in reqs] == [
        ("c1-0", "c1", 0, "chat"), ("c1-1", "c1", 1, "chat"), ("line2-0", "line2", 0, None)]
    assert reqs[1].prompt_ids.tolist() == dialog(l3, ("system", "Be brief."), ("user", "Hi!"), ("assistant", "Hello."), ("user", "Say it again."))
    assert reqs[1].output_ids.tolist() == enc(l3, "Hello.") + [EOT]
    assert_round_trip(reqs, tmp_path)


def test_chat_sharegpt_fixture(l3, tmp_path):
    reqs = load_chat(DATA / "chat_sharegpt.json")
    assert [r.id for r in reqs] == ["s1-0", "s1-1"]
    assert reqs[1].prompt_ids.tolist() == dialog(l3, ("user", "Count to three."), ("assistant", "1, 2, 3."), ("user", "And back?"))
    assert_round_trip(reqs, tmp_path)


@pytest.mark.parametrize("rel, fmt", [
    ("fastchat/model_answer/fixture.jsonl", "fastchat"), ("alpacaeval.json", "alpacaeval"),
    ("prompt_response.jsonl", "prompt-response"), ("wmt/en-de.Sys.txt", "wmt"),
    ("chat_openai.jsonl", "chat"), ("chat_sharegpt.json", "chat"),
])
def test_sniffing_picks_the_loader(rel, fmt):
    assert sniff_format(DATA / rel) == fmt


def test_format_override_and_unsniffable(tmp_path):
    weird = tmp_path / "weird.jsonl"
    weird.write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(TraceError, match=r"weird\.jsonl:1: cannot tell the trace format"):
        load_workload(weird)
    with pytest.raises(ConfigError, match="unknown trace format 'nope'"):
        load_workload(DATA / "alpacaeval.json", format="nope")
    same = load_workload(DATA / "chat_sharegpt.json", format="sharegpt")
    assert [r.id for r in same] == ["s1-0", "s1-1"]


def test_text_trace_with_other_tokenizer_and_template(sp):
    reqs = load_workload(DATA / "chat_sharegpt.json", tokenizer="llama2", template="llama-2")
    # Meta's reference chat_completion: encode(f"[INST] {q} [/INST] {a} ", bos, eos) per exchange
    assert reqs[1].prompt_ids.tolist() == ([1] + sp.encode("[INST] Count to three. [/INST] 1, 2, 3. ") + [2, 1]
                                           + sp.encode("[INST] And back? [/INST]"))
    assert reqs[1].output_ids.tolist() == sp.encode("3, 2, 1.") + [2]


# ---------------------------------------------------------------- bundled traces


@pytest.mark.parametrize("name", sorted(bundled_traces("workload")))
def test_bundled_trace_matches_its_metadata_and_round_trips(name, tmp_path):
    trace = bundled_traces("workload")[name]
    raw = gzip.decompress(trace.path.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == trace.info["sha256_jsonl"]
    reqs = load_workload(name)
    counts = trace.info["counts"]
    records = [json.loads(line) for line in raw.decode().splitlines()]
    assert counts["requests"] == len(reqs) == len(records)
    assert counts["prompt_tokens"] == sum(len(r["prompt_ids"]) for r in records)
    assert counts["output_tokens"] == sum(len(r["output_ids"]) for r in records)
    cats = {}
    for r in records:
        cats[r.get("category")] = cats.get(r.get("category"), 0) + 1
    assert counts["categories"] == cats
    for key in ("sources", "licence", "tokenizer", "template", "eos"):
        assert trace.info[key]
    # export through the CLI, load back: identical requests
    out = tmp_path / f"{name}.jsonl"
    result = CliRunner().invoke(_app(), ["workloads", "export", name, "--out", str(out)])
    assert result.exit_code == 0, result.output
    back = load_workload(out)
    assert len(back) == len(reqs) and all(a.same_as(b) for a, b in zip(reqs, back))


def test_bundled_specbench_shape():
    reqs = load_workload("specbench")
    assert len(reqs) == 560 and len({r.session for r in reqs}) == 480
    two_turn = {r.session for r in reqs if r.turn == 1}
    assert len(two_turn) == 80 and {int(s) for s in two_turn} == set(range(81, 161))
    by_id = {r.id: r for r in reqs}
    # turn 2's prompt starts with turn 1's prompt and then turn 1's answer (EOS included)
    t0, t1 = by_id["81-0"], by_id["81-1"]
    head = np.concatenate([t0.prompt_ids, t0.output_ids])
    assert np.array_equal(t1.prompt_ids[: len(head) - 1], head[:-1])  # the answer re-tokenizes inside the prompt
    assert t1.prompt_ids[len(head) - 1] == 2
    no_eos = sorted(r.id for r in reqs if r.output_ids[-1] != 2)
    assert no_eos == sorted(["92-0", "372-0", "386-0", "399-0", "526-0", "123-1"])
    assert {r.category for r in reqs} >= {"writing", "coding", "translation", "summarization", "qa", "math_reasoning", "rag"}


def _app():
    import typer

    from specplan.cli import workloads

    app = typer.Typer()
    app.command("noop")(lambda: None)  # a second command keeps 'workloads' a named group
    workloads.register(app)
    return app


def test_cli_list_and_show():
    runner = CliRunner()
    listing = runner.invoke(_app(), ["workloads", "list"], env={"COLUMNS": "200"})
    assert listing.exit_code == 0, listing.output
    for name, trace in bundled_traces("workload").items():
        line = next(l for l in listing.output.splitlines() if f" {name} " in l)
        assert str(trace.info["counts"]["requests"]) in line and str(trace.info["counts"]["output_tokens"]) in line
    assert "specbench-eagle" in listing.output
    shown = runner.invoke(_app(), ["workloads", "show", "mtbench"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    lens = np.array([r.output_len for r in load_workload("mtbench")])
    row = next(l for l in shown.output.splitlines() if "output" in l and "│" in l)
    cells = [c.strip() for c in row.split("│") if c.strip()]
    assert cells[4] == f"{np.percentile(lens, 50):.0f}" and cells[-1] == str(lens.sum())


# ---------------------------------------------------------------- malformed input


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_bad_json_line_names_file_and_line(tmp_path):
    path = _write(tmp_path, "chat.jsonl", '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}\n{"messages": [\n')
    with pytest.raises(TraceError, match=r"chat\.jsonl:2: invalid JSON"):
        load_chat(path)


def test_bad_json_in_array_names_line(tmp_path):
    path = _write(tmp_path, "a.json", '[\n {"instruction": "x", "output": "y"},\n {"instruction": "x" "output": "y"}\n]\n')
    with pytest.raises(TraceError, match=r"a\.json:3: invalid JSON"):
        load_alpacaeval(path)


def test_missing_field_names_line_and_field(tmp_path):
    path = _write(tmp_path, "a.json", '[\n {"instruction": "x", "output": "y"},\n {"instruction": "x"}\n]\n')
    with pytest.raises(TraceError, match=r"a\.json:3: missing field 'output'"):
        load_alpacaeval(path)


def test_empty_output_is_refused(tmp_path):
    path = _write(tmp_path, "pr.jsonl", json.dumps({"id": "a", "prompt": "p", "response": "r"}) + "\n"
                  + json.dumps({"id": "b", "prompt": "p", "response": "  "}) + "\n")
    with pytest.raises(TraceError, match=r"pr\.jsonl:2: field 'response' is empty"):
        load_prompt_response(path)


def test_fastchat_errors(tmp_path):
    (tmp_path / "question.jsonl").write_text(json.dumps({"question_id": 1, "turns": ["q1", "q2"]}) + "\n")
    ans = _write(tmp_path, "ans.jsonl", json.dumps({"question_id": 1, "choices": [{"turns": ["a1", ""]}]}) + "\n")
    with pytest.raises(TraceError, match=r"ans\.jsonl:1: field 'choices\[0\]\.turns\[1\]' is empty"):
        load_fastchat(ans)
    ans.write_text(json.dumps({"question_id": 7, "choices": [{"turns": ["a1", "a2"]}]}) + "\n")
    with pytest.raises(TraceError, match=r"ans\.jsonl:1: field 'question_id' question id 7 is not in"):
        load_fastchat(ans)
    ans.write_text(json.dumps({"question_id": 1, "choices": [{"turns": ["a1"]}]}) + "\n")
    with pytest.raises(TraceError, match=r"ans\.jsonl:1: field 'choices\[0\]\.turns' has 1 answers for the 2 turns"):
        load_fastchat(ans)
    ans.write_text(json.dumps({"question_id": 1, "choices": [{"turns": ["a1", "a2"], "new_tokens": [3]}]}) + "\n")
    with pytest.raises(TraceError, match=r"ans\.jsonl:1: field 'choices\[0\]\.new_tokens' must hold one integer per turn"):
        load_fastchat(ans)


def test_chat_errors(tmp_path):
    path = _write(tmp_path, "c.jsonl", json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]}) + "\n")
    with pytest.raises(TraceError, match=r"c\.jsonl:1: field 'messages\[1\]\.role' unknown role 'robot'"):
        load_chat(path)
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                                             {"role": "assistant", "content": "c"}]}) + "\n")
    with pytest.raises(TraceError, match=r"c\.jsonl:1: field 'messages' cannot be rendered: .*message 1 has role 'user', expected 'assistant'"):
        load_chat(path)
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}]}) + "\n")
    with pytest.raises(TraceError, match=r"c\.jsonl:1: the conversation holds no assistant answer"):
        load_chat(path)
    path.write_text(json.dumps({"id": "x", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}) + "\n"
                    + json.dumps({"id": "x", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}) + "\n")
    with pytest.raises(TraceError, match=r"duplicate request id 'x-0'"):
        load_chat(path)


def test_wmt_misaligned_files(tmp_path):
    (tmp_path / "en-de.src.txt").write_text("a\nb\n")
    out = _write(tmp_path, "en-de.X.txt", "A\n")
    with pytest.raises(TraceError, match=r"en-de\.src\.txt: 2 lines, but .*en-de\.X\.txt has 1"):
        load_wmt(out)


def test_unknown_names(tmp_path):
    with pytest.raises(TraceError, match=r"nosuch: no bundled trace of that name and no such file \(bundled: .*specbench"):
        load_workload("nosuch")
    with pytest.raises(ConfigError, match=r"tokenizer: unknown tokenizer 'gpt-9'"):
        load_chat(DATA / "chat_openai.jsonl", tokenizer="gpt-9")
    with pytest.raises(ConfigError, match="a token trace is already tokenized"):
        load_workload(write_token_trace(read_token_trace(bundled_traces()["mtbench"].path)[:2], tmp_path / "t.jsonl"), tokenizer="llama2")
