"""Regenerate ``specbench_eagle.jsonl``: four real Spec-Bench requests with their step-by-step commits.

For each chosen single-turn question, the vicuna-7b-v1.3 EAGLE answer is tokenized with the Llama-2
SentencePiece model exactly as ``../shared/data/README.md`` describes (vicuna_v1.1 template, BOS, answer
re-encoded with EOS appended), and EAGLE's logged ``accept_lengths`` (tokens committed per target
forward, bonus included) split the answer into the steps the SA kernel test replays; the split is cut or
padded at the end so it covers exactly the re-encoded tokens. The output is a valid token trace
(``specplan.workloads.tokentrace``) with one extra field, ``accept_lengths``.

Run from the repository root: ``python tests/data/sa_kernel/make_fixture.py``.
"""

import json
from pathlib import Path

import sentencepiece as spm

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
QUESTION_IDS = (166, 242, 326, 401)  # translation, summarization, qa, math_reasoning
SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
          "The assistant gives helpful, detailed, and polite answers to the user's questions.")
BOS, EOS = 1, 2


def main() -> None:
    sp = spm.SentencePieceProcessor(model_file=str(DATA / "tokenizers" / "llama2" / "tokenizer.model"))
    questions = {}
    with open(DATA / "specbench" / "question.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            questions[q["question_id"]] = q
    answers = {}
    with open(DATA / "specbench" / "vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl", encoding="utf-8") as fh:
        for line in fh:
            a = json.loads(line)
            answers[a["question_id"]] = a
    out = Path(__file__).with_name("specbench_eagle.jsonl")
    with open(out, "w", encoding="utf-8") as fh:
        for qid in QUESTION_IDS:
            q, choice = questions[qid], answers[qid]["choices"][0]
            prompt = [BOS] + sp.encode(f"{SYSTEM} USER: {q['turns'][0]} ASSISTANT:")
            output = sp.encode(choice["turns"][0]) + [EOS]
            steps, total = [], 0
            for n in choice["accept_lengths"]:
                n = min(n, len(output) - total)
                if n <= 0:
                    break
                steps.append(n)
                total += n
            if total < len(output):
                steps.append(len(output) - total)
            record = {"id": f"specbench-{qid}", "category": q["category"], "prompt_ids": prompt,
                      "output_ids": output, "accept_lengths": steps}
            fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
