"""Regenerate ``specbench_vanilla.jsonl``: a small real token trace for the drafter tests.

Spec-Bench questions answered by vicuna-7b-v1.3 (plain greedy run), tokenized with the Llama-2
SentencePiece model as ``../shared/data/README.md`` describes: vicuna_v1.1 template, BOS, each
piece between ``</s>`` encoded on its own with ``</s>`` as id 2; answers re-encoded with EOS (2)
appended. Two-turn MT-bench questions give two requests of one session, the second prompt holding
the first turn and its answer. The output is a token trace (``specplan.workloads.tokentrace``).

Run from the repository root: ``python tests/data/drafters/make_fixture.py``.
"""

import json
from pathlib import Path

import sentencepiece as spm

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
# writing, math, coding, extraction (two turns each); summarization x2, translation, qa, math_reasoning, rag
QUESTION_IDS = (90, 116, 126, 135, 277, 275, 164, 362, 418, 496)
SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
          "The assistant gives helpful, detailed, and polite answers to the user's questions.")
BOS, EOS = 1, 2


def encode_prompt(sp, text):
    ids = [BOS]
    for i, piece in enumerate(text.split("</s>")):
        if i:
            ids.append(EOS)
        ids.extend(sp.encode(piece))
    return ids


def main() -> None:
    sp = spm.SentencePieceProcessor(model_file=str(DATA / "tokenizers" / "llama2" / "tokenizer.model"))
    with open(DATA / "specbench" / "question.jsonl", encoding="utf-8") as fh:
        questions = {q["question_id"]: q for q in map(json.loads, fh)}
    with open(DATA / "specbench" / "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl", encoding="utf-8") as fh:
        answers = {a["question_id"]: a for a in map(json.loads, fh)}
    out = Path(__file__).with_name("specbench_vanilla.jsonl")
    with open(out, "w", encoding="utf-8") as fh:
        for qid in QUESTION_IDS:
            q, turns = questions[qid], answers[qid]["choices"][0]["turns"]
            text = SYSTEM
            for t, (question, answer) in enumerate(zip(q["turns"], turns)):
                text += f" USER: {question} ASSISTANT:"
                record = {"id": f"specbench-{qid}-t{t}", "category": q["category"], "session": f"q{qid}",
                          "turn": t, "prompt_ids": encode_prompt(sp, text),
                          "output_ids": sp.encode(answer) + [EOS]}
                fh.write(json.dumps(record, separators=(",", ":")) + "\n")
                text += f" {answer}</s>"


if __name__ == "__main__":
    main()
