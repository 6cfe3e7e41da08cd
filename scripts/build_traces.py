#!/usr/bin/env python
"""Build the bundled traces under ``specplan/data/traces/`` from the raw data in ``../shared/data``.

    python scripts/build_traces.py                 # (re)build everything
    python scripts/build_traces.py --only specbench
    python scripts/build_traces.py --check         # rebuild in a temporary folder, compare with the
                                                   # committed files, measure tokenization exactness

Every trace is tokenized with the specplan loaders (so building also exercises them) and written as a
token trace ``NAME.jsonl.gz`` plus ``NAME.yaml`` (provenance, licence, tokenizer, template, counts,
sha256 of the uncompressed JSON lines). The Llama-1/2 SentencePiece model is bundled too (gzip, with
its licence files), so ``get_tokenizer("llama2")`` works offline. Output is byte-reproducible. The
package itself never reads ``../shared``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from specplan.workloads.loaders import load_alpacaeval, load_fastchat, load_prompt_response, load_wmt  # noqa: E402
from specplan.workloads.records import atomic_writer, get_field, iter_records, write_jsonl  # noqa: E402
from specplan.workloads.request import Request  # noqa: E402
from specplan.workloads.tokenization import SentencePieceTokenizer  # noqa: E402
from specplan.workloads.tokentrace import request_to_record  # noqa: E402

DEFAULT_SHARED = ROOT.parent / "shared" / "data"
DATA = ROOT / "specplan" / "data"
LLAMA2_SHA256 = "9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347"
#: Turns of the Spec-Bench vanilla run that stopped at the 1024-token limit without EOS (data README).
SPECBENCH_CUT_TURNS = {"92-0", "372-0", "386-0", "399-0", "526-0", "123-1"}
MIN_EXACTNESS = 0.99

SPECBENCH_REPO = "hemingkx/Spec-Bench@fd2c1cd7d2201ef71db4c5f4e455008f017967bf"
SPECBENCH_FORK = "yukiki-jc/Spec-Bench@3b73a28cde526f453b6fb9fe5ca91bc9f0731853"
VANILLA = "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl"
RECORDED_RUNS = {
    "specbench-eagle": ("vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl",
                        "EAGLE-1 tree decoding (yuhuili/EAGLE-Vicuna-7B-v1.3), vicuna-7b-v1.3 fp16 greedy"),
    "specbench-sps": ("vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl",
                      "HF assisted generation (draft double7/vicuna-68m, num_assistant_tokens=5, dynamic), vicuna-7b-v1.3 fp16 greedy"),
}
LICENCE_VICUNA = ("Spec-Bench repository Apache-2.0; prompts from MT-bench (Apache-2.0), WMT14 (research use), CNN/DailyMail, "
                  "Natural Questions (CC-BY-SA-3.0), GSM8K (MIT); responses by vicuna-7b-v1.3 (LLaMA v1 licence: "
                  "non-commercial research use only). Token ids from the Llama 2 tokenizer (Llama 2 Community License).")


@dataclass
class Spec:
    """One bundled trace: how to build it and what to record about it."""

    name: str
    build: Callable[[Path], list[Request]]
    info: dict


def _llama2(shared: Path) -> SentencePieceTokenizer:
    return SentencePieceTokenizer(shared / "tokenizers" / "llama2" / "tokenizer.model", name="llama2")


SPECS = [
    Spec("specbench", lambda d: load_fastchat(d / "specbench" / VANILLA, d / "specbench" / "question.jsonl", tokenizer=_llama2(d), template="vicuna"), {
        "description": "Spec-Bench: 480 questions / 560 turns, 13 categories (the 8 MT-bench ones two-turn; translation "
                       "de->en, summarization, qa, math_reasoning, rag), greedy vicuna-7b-v1.3 answers",
        "model": "vicuna-7b-v1.3 (fp16, temperature 0: greedy)",
        "tokenizer": "llama2: Llama-1/2 SentencePiece, HF legacy LlamaTokenizer mode (BOS, prompt split on </s>); exact for vicuna",
        "template": "vicuna (FastChat vicuna_v1.1); turn n's prompt holds earlier questions and the model's own answers",
        "eos": "</s> (id 2) appended to every answer except the six turns that hit the 1024-token limit (new_tokens = 1024)",
        "ids": "'{question_id}-{turn}' (turn 0-based); session = question_id",
        "sources": [f"{SPECBENCH_REPO}:data/spec_bench/question.jsonl", f"{SPECBENCH_FORK}:data/spec_bench/model_answer/{VANILLA}"],
        "licence": LICENCE_VICUNA,
    }),
    Spec("mtbench", lambda d: load_fastchat(d / "mtbench" / "model_answer" / "vicuna-7b-v1.3.jsonl", d / "mtbench" / "question.jsonl",
                                           tokenizer=_llama2(d), template="vicuna"), {
        "description": "MT-bench: 80 two-turn questions (8 categories x 10), the official vicuna-7b-v1.3 answers",
        "model": "vicuna-7b-v1.3; FastChat temperatures: greedy for extraction, math, coding, reasoning; 0.7 writing, roleplay; 0.1 stem, humanities",
        "tokenizer": "llama2 (exact for vicuna)",
        "template": "vicuna (FastChat vicuna_v1.1); turn 2's prompt holds turn 1 and the model's own turn-1 answer",
        "eos": "</s> (id 2) appended (no answer reaches the 1024-token limit)",
        "ids": "'{question_id}-{turn}'; session = question_id",
        "sources": ["lm-sys/FastChat@0e6d3e4beaab66f4d3f93db72541a4abab8af28d:fastchat/llm_judge/data/mt_bench/question.jsonl",
                    "enricai/FastChat@edacaa5bd955893e72a7e6f0899d8301fd5ae492:fastchat/llm_judge/data/mt_bench/model_answer/vicuna-7b-v1.3.jsonl"],
        "licence": "FastChat Apache-2.0; responses by vicuna-7b-v1.3 (LLaMA v1 licence: non-commercial research use only); Llama 2 tokenizer.",
    }),
    Spec("alpacaeval", lambda d: load_alpacaeval(d / "alpacaeval" / "Meta-Llama-3-8B-Instruct.model_outputs.json"), {
        "description": "AlpacaEval: 805 single-turn instructions with Meta-Llama-3-8B-Instruct outputs; category = source data set",
        "model": "Meta-Llama-3-8B-Instruct via the Together API (sampled, provider defaults; max_tokens 4096)",
        "tokenizer": "llama3 (PyPI llama-models 0.3.0; exact)",
        "template": "llama-3 (llama_models ChatFormat: the instruction as the one user message)",
        "eos": "<|eot_id|> (128009) appended",
        "ids": "'alpacaeval-{index}' (0-based file order)",
        "sources": ["tatsu-lab/alpaca_eval@cd543a149df89434d8a54582c0151c0b945c3d20:results/Meta-Llama-3-8B-Instruct/model_outputs.json"],
        "licence": "AlpacaEval data CC-BY-NC-4.0 (non-commercial); outputs under the Meta Llama 3 Community License.",
    }),
    Spec("aider", lambda d: load_prompt_response(d / "aider" / "exchanges.jsonl", category="code_editing"), {
        "description": "157 real aider code-editing exchanges (pre-edit files + request -> SEARCH/REPLACE reply), rebuilt from aider's development log",
        "model": "claude-3-5-sonnet-20240620 (154), gpt-4o (1), unknown (2); sampled (API defaults)",
        "tokenizer": "llama3 as a PROXY: Claude's tokenizer is not public, so token counts and ids are approximate",
        "template": "llama-3 with the exchange's prompt (files then request) as the one user message; aider's system prompt, repo map and earlier turns are absent",
        "eos": "<|eot_id|> (128009) appended",
        "ids": "the exchange id 'aider-s{session}-t{turn}'; treated as independent single turns (session unset)",
        "sources": ["Aider-AI/aider@5dc9490bb35f9729ef2c95d00a19ccd30c26339c:tests/fixtures/chat-history.md (rebuilt exchanges, see shared/data/README.md)"],
        "licence": "aider log and source files Apache-2.0; replies are Claude (Anthropic terms) / GPT-4o (OpenAI terms) outputs.",
    }),
    Spec("wmt24-en-de", lambda d: load_wmt(d / "wmt24" / "en-de.Llama3-70B.txt"), {
        "description": "WMT24 general task en->de: 997 paragraph segments (canary line skipped) with the Llama3-70B submission; category = domain",
        "model": "Llama-3-70B-Instruct run by the WMT24 organisers (prompt and decoding settings not recorded)",
        "tokenizer": "llama3 (PyPI llama-models 0.3.0; exact)",
        "template": "llama-3; ASSUMED prompt: 'Translate the following text from English into German. Reply with the translation only.\\n\\n{segment}'",
        "eos": "<|eot_id|> (128009) appended",
        "ids": "'en-de-{line}' (1-based line of the WMT files)",
        "sources": [f"wmt-conference/wmt24-news-systems@bfa937ee53586aa173d68657b89b8642693f7b66:txt/{p}"
                    for p in ("sources/en-de.txt", "system-outputs/en-de/Llama3-70B.txt", "documents/en-de.docs")],
        "licence": "WMT test sets: research use (no licence file in the repository); outputs under the Meta Llama 3 Community License.",
    }),
]


def sha256_of_gz(path: Path) -> str:
    return hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()


def write_yaml(info: dict, path: Path) -> None:
    with atomic_writer(path) as fh:
        yaml.safe_dump(info, fh, sort_keys=False, allow_unicode=True, width=120)


def write_workload(spec: Spec, requests: list[Request], out: Path) -> dict:
    path = out / f"{spec.name}.jsonl.gz"
    write_jsonl((request_to_record(r) for r in requests), path)
    counts = {
        "requests": len(requests),
        "sessions": len({r.session for r in requests if r.session is not None}),
        "prompt_tokens": sum(r.prompt_len for r in requests),
        "output_tokens": sum(r.output_len for r in requests),
        "categories": dict(sorted(Counter(r.category for r in requests).items())),
    }
    info = {"name": spec.name, "kind": "workload", **spec.info, "counts": counts, "sha256_jsonl": sha256_of_gz(path),
            "built_by": "scripts/build_traces.py"}
    write_yaml(info, out / f"{spec.name}.yaml")
    return info


def specbench_exactness(requests: list[Request]) -> tuple[int, int, set[str]]:
    """(turns whose re-tokenized output length equals the recorded new_tokens, turns, ids without EOS)."""
    exact = sum(1 for r in requests if r.output_len == r.meta["new_tokens"])
    cut = {r.id for r in requests if r.output_ids[-1] != 2}
    return exact, len(requests), cut


def build_recorded(shared: Path, out: Path) -> list[dict]:
    """Per-turn accept_lengths of the Spec-Bench EAGLE and SPS runs, split with decoding_steps."""
    infos = []
    for name, (fname, method) in RECORDED_RUNS.items():
        records, steps, tokens = [], 0, 0
        for where, row in iter_records(shared / "specbench" / fname):
            qid = get_field(row, "question_id", int, where)
            choice = get_field(row, "choices", list, where)[0]
            lengths = get_field(choice, "accept_lengths", list, where, label="choices[0].accept_lengths")
            per_turn = get_field(choice, "decoding_steps", list, where, label="choices[0].decoding_steps")
            new_tokens = get_field(choice, "new_tokens", list, where, label="choices[0].new_tokens")
            if sum(per_turn) != len(lengths):
                raise where.error("decoding_steps do not add up to the accept_lengths logged", "choices[0].decoding_steps")
            start = 0
            for turn, (n_steps, n_tokens) in enumerate(zip(per_turn, new_tokens)):
                chunk = lengths[start : start + n_steps]
                start += n_steps
                if sum(chunk) != n_tokens:
                    raise where.error(f"turn {turn}: accept_lengths sum to {sum(chunk)}, new_tokens says {n_tokens}", "choices[0].accept_lengths")
                records.append({"id": f"{qid}-{turn}", "accepted_per_step": chunk})
                steps += n_steps
                tokens += n_tokens
        path = out / f"{name}.jsonl.gz"
        write_jsonl(records, path)
        info = {
            "name": name, "kind": "recorded_acceptance", "workload": "specbench",
            "description": f"Per-step committed tokens (bonus included) of the Spec-Bench {method} run, one record per turn",
            "format": "{\"id\": \"{question_id}-{turn}\", \"accepted_per_step\": [tokens committed per target forward pass]}",
            "notes": "The speculative run's answers drift from the vanilla run's (fp16) late in some turns, so a log can be "
                     "shorter or longer than the specbench trace's output; the oracle restarts an exhausted log.",
            "sources": [f"{SPECBENCH_FORK}:data/spec_bench/model_answer/{fname}"],
            "licence": "Spec-Bench fork repository Apache-2.0; logs of vicuna-7b-v1.3 runs (LLaMA v1 licence: non-commercial research use only).",
            "counts": {"requests": len(records), "steps": steps, "tokens": tokens, "tokens_per_step": round(tokens / steps, 4)},
            "sha256_jsonl": sha256_of_gz(path), "built_by": "scripts/build_traces.py",
        }
        write_yaml(info, out / f"{name}.yaml")
        infos.append(info)
    return infos


def bundle_llama2(shared: Path, data: Path) -> None:
    src = shared / "tokenizers" / "llama2"
    model = (src / "tokenizer.model").read_bytes()
    if hashlib.sha256(model).hexdigest() != LLAMA2_SHA256:
        raise SystemExit(f"{src / 'tokenizer.model'}: sha256 differs from the documented {LLAMA2_SHA256}")
    dest = data / "tokenizers" / "llama2"
    with atomic_writer(dest / "tokenizer.model.gz", binary=True) as fh:
        fh.write(model)
    for name in ("LICENSE", "NOTICE", "USE_POLICY.md"):
        with atomic_writer(dest / name) as fh:
            fh.write((src / name).read_text(encoding="utf-8"))


def build(shared: Path, data: Path, only: set[str] | None) -> dict:
    """Build into ``data`` (the package-data root); returns a summary with the exactness figure."""
    traces = data / "traces"
    summary = {}
    if only is None or "llama2" in only:
        bundle_llama2(shared, data)
    for spec in SPECS:
        if only is not None and spec.name not in only:
            continue
        requests = spec.build(shared)
        info = write_workload(spec, requests, traces)
        summary[spec.name] = info["counts"]
        if spec.name == "specbench":
            exact, total, cut = specbench_exactness(requests)
            summary["exactness"] = (exact, total)
            print(f"specbench tokenization exactness: {exact}/{total} turns = {exact / total:.4f}")
            if cut != SPECBENCH_CUT_TURNS:
                raise SystemExit(f"specbench: turns without EOS {sorted(cut)} differ from the documented {sorted(SPECBENCH_CUT_TURNS)}")
            if exact / total < MIN_EXACTNESS:
                raise SystemExit(f"specbench: exactness {exact / total:.4f} below {MIN_EXACTNESS}")
    if only is None or only & set(RECORDED_RUNS):
        for info in build_recorded(shared, traces):
            summary[info["name"]] = info["counts"]
    return summary


def compare(fresh: Path, committed: Path) -> list[str]:
    """Files that differ between a fresh build and the committed package data (gz by content)."""
    problems = []
    for path in sorted(p for p in fresh.rglob("*") if p.is_file()):
        rel = path.relative_to(fresh)
        other = committed / rel
        if not other.is_file():
            problems.append(f"{rel}: missing from {committed}")
            continue
        read = (lambda p: gzip.decompress(p.read_bytes())) if path.suffix == ".gz" else (lambda p: p.read_bytes())
        if read(path) != read(other):
            problems.append(f"{rel}: differs from a fresh build (run scripts/build_traces.py)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the raw data folder (default ../shared/data)")
    parser.add_argument("--out", type=Path, default=DATA, help="package-data root (default specplan/data)")
    parser.add_argument("--only", nargs="+", help="build only these (trace names, 'llama2' for the tokenizer)")
    parser.add_argument("--check", action="store_true", help="build in a temporary folder and compare with --out")
    args = parser.parse_args(argv)
    if not args.shared.is_dir():
        print(f"error: {args.shared}: raw data folder not found (pass --shared)", file=sys.stderr)
        return 2
    only = set(args.only) if args.only else None
    if not args.check:
        build(args.shared, args.out, only)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="build_traces."))
    try:
        build(args.shared, tmp, only)
        problems = compare(tmp, args.out)
    finally:
        shutil.rmtree(tmp)
    for line in problems:
        print(f"MISMATCH {line}")
    print("check: ok" if not problems else f"check: {len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
