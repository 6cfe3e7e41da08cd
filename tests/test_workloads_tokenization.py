"""Tokenizer adapters and chat templates, checked against hand-computed ids and the reference
libraries; Spec-Bench tokenization exactness through ``scripts/build_traces.py --check``."""

from __future__ import annotations

import gzip
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
from llama_models.datatypes import RawMessage
from llama_models.llama3.chat_format import ChatFormat
from llama_models.llama3.tokenizer import Tokenizer as Llama3
from tokenizers import Tokenizer as HFLib
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from specplan.errors import ConfigError
from specplan.workloads.chat_templates import get_template
from specplan.workloads.loaders import load_chat
from specplan.workloads.tokenization import (
    HFTokenizer,
    Llama3Tokenizer,
    SentencePieceTokenizer,
    TiktokenTokenizer,
    bundled_llama2_path,
    get_tokenizer,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "workloads"
SHARED = ROOT.parent / "shared" / "data"


def test_bundled_llama2_is_the_documented_model():
    model = gzip.decompress(bundled_llama2_path().read_bytes())
    assert hashlib.sha256(model).hexdigest() == "9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347"
    for name in ("LICENSE", "NOTICE", "USE_POLICY.md"):
        assert (bundled_llama2_path().parent / name).is_file()


def test_llama2_legacy_split_on_specials():
    tok = get_tokenizer("llama2")
    assert isinstance(tok, SentencePieceTokenizer)
    sp = spm.SentencePieceProcessor(model_proto=gzip.decompress(bundled_llama2_path().read_bytes()))
    assert tok.encode("Hello world") == [15043, 3186]  # the value check_tokenizers.py pins
    ids = tok.encode_prompt("<s>Hi there</s>USER: ok")
    assert ids == [1] + sp.encode("Hi there") + [2] + sp.encode("USER: ok")
    assert [sp.id_to_piece(i) for i in ids[ids.index(2) + 1 : ids.index(2) + 3]] == ["▁US", "ER"]
    assert tok.encode("a</s>b") == sp.encode("a</s>b")  # plain text: </s> is text, not EOS
    assert 2 not in tok.encode("a</s>b")
    assert (tok.token_id("</s>"), tok.token_id("<s>")) == (2, 1)


def test_tiktoken_file_adapter():
    path = DATA / "tiny.tiktoken"  # 256 byte tokens, then "th" 256, "the" 257, " the" 258
    tok = get_tokenizer(path)
    assert isinstance(tok, TiktokenTokenizer) and not isinstance(tok, Llama3Tokenizer)
    assert tok.encode("the") == [257]
    assert tok.encode(" the") == [258]
    assert tok.encode("a the") == [97, 258]
    assert tok.encode("tho") == [256, ord("o")]
    with_end = TiktokenTokenizer.from_file(path, special_tokens=["<|end|>"])
    assert with_end.encode_prompt("the<|end|>") == [257, 259]
    assert with_end.encode("<|end|>") == list(b"<|end|>")
    assert with_end.special_id("<|end|>") == 259 and with_end.special_id("<|nope|>") is None


def test_llama3_by_name_and_by_file():
    tok = get_tokenizer("llama3")
    ref = Llama3.get_instance()
    text = "def f(x):\n    return x  # café, 東京 <|eot_id|>"
    assert tok.encode(text) == ref.encode(text, bos=False, eos=False)
    assert tok.encode_prompt("<|begin_of_text|>hi<|eot_id|>") == [128000, ref.encode("hi", bos=False, eos=False)[0], 128009]
    assert tok.token_id("<|eot_id|>") == 128009
    # the same rank file read by path is recognised by content as a Llama-3 tiktoken file
    import llama_models.llama3 as pkg

    by_path = get_tokenizer(Path(pkg.__file__).parent / "tokenizer.model")
    assert isinstance(by_path, Llama3Tokenizer) and by_path.encode(text) == tok.encode(text)


def _tiny_hf(folder: Path) -> Path:
    lib = HFLib(WordLevel({"[UNK]": 0, "hello": 1, "world": 2, "user": 3, "assistant": 4}, unk_token="[UNK]"))
    lib.pre_tokenizer = Whitespace()
    lib.add_special_tokens(["<|im_start|>", "<|im_end|>"])  # ids 5, 6
    path = folder / "tokenizer.json"
    lib.save(str(path))
    return path


def test_hf_tokenizer_json_with_chatml(tmp_path):
    _tiny_hf(tmp_path)
    tok = get_tokenizer(tmp_path)  # a folder holding tokenizer.json
    assert isinstance(tok, HFTokenizer)
    assert tok.encode_prompt("<|im_start|>user\nhello world<|im_end|>") == [5, 3, 1, 2, 6]
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"id": "a", "messages": [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "hello"}]}\n')
    (req,) = load_chat(chat, tokenizer=tmp_path / "tokenizer.json", template="chatml")
    assert req.prompt_ids.tolist() == [5, 3, 1, 2, 6, 5, 4]
    assert req.output_ids.tolist() == [1, 6]


def test_template_without_matching_special_token(tmp_path):
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}\n')
    with pytest.raises(ConfigError, match=r"tokenizer 'llama2' has no special token '<\|im_end\|>'"):
        load_chat(chat, tokenizer="llama2", template="chatml")


def test_llama3_template_equals_chat_format():
    l3 = Llama3.get_instance()
    tok = get_tokenizer("llama3")
    msgs = [("system", "You are terse."), ("user", " Two  spaces\n"), ("assistant", "Fine."), ("user", "Again?")]
    expected = ChatFormat(l3).encode_dialog_prompt([RawMessage(role=r, content=c) for r, c in msgs]).tokens
    assert tok.encode_prompt(get_template("llama-3").render(msgs)) == expected


def test_vicuna_and_llama2_strings():
    sys_prompt = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
                  "detailed, and polite answers to the user's questions.")
    msgs = [("user", "q1"), ("assistant", "a1"), ("user", "q2")]
    # FastChat vicuna_v1.1 as documented in shared/data/README.md (BOS written as <s>)
    assert get_template("vicuna_v1.1").render(msgs) == f"<s>{sys_prompt} USER: q1 ASSISTANT: a1</s>USER: q2 ASSISTANT:"
    assert get_template("llama-2").render([("system", "S"), *msgs]) == "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nq1 [/INST] a1 </s><s>[INST] q2 [/INST]"
    assert get_template("chatml").render(msgs[:1]) == "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n"


def test_unknown_tokenizer_and_template(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown tokenizer 'mistral-9'.*llama2, llama3"):
        get_tokenizer("mistral-9")
    with pytest.raises(ConfigError, match=r"folder holds neither tokenizer\.json nor tokenizer\.model"):
        get_tokenizer(tmp_path)
    bad = tmp_path / "tokenizer.model"
    bad.write_bytes(b"\x00\x01 not a model")
    with pytest.raises(ConfigError, match=r"not a readable SentencePiece model"):
        get_tokenizer(bad)
    with pytest.raises(ConfigError, match=r"unknown chat template 'alpaca'"):
        get_template("alpaca")


@pytest.mark.skipif(not SHARED.is_dir(), reason="raw data (../shared/data) not present")
def test_build_check_and_specbench_exactness():
    """Rebuilding every bundled trace from the raw data reproduces the committed files, and the
    re-tokenized Spec-Bench answers match the recorded new_tokens on >= 99% of turns."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_traces.py"), "--check", "--shared", str(SHARED)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exact, total = map(int, re.search(r"exactness: (\d+)/(\d+) turns", proc.stdout).groups())
    assert total == 560 and exact / total >= 0.99
    assert "check: ok" in proc.stdout


@pytest.mark.skipif(not SHARED.is_dir(), reason="raw data (../shared/data) not present")
def test_build_check_detects_a_stale_trace(tmp_path):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(ROOT / "specplan" / "data" / "traces", data / "traces")
    with gzip.open(data / "traces" / "mtbench.jsonl.gz", "wt") as fh:
        fh.write('{"id": "x", "prompt_ids": [1], "output_ids": [2]}\n')
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_traces.py"), "--check", "--only", "mtbench",
                           "--shared", str(SHARED), "--out", str(data)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "MISMATCH traces/mtbench.jsonl.gz: differs from a fresh build" in proc.stdout
    assert "mtbench.yaml" not in proc.stdout  # its metadata still matches: only the data was tampered with
