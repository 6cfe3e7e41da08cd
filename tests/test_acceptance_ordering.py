"""Real repetition orders the bundled traces (issue 3): SA and the NGram pool at K = 5.

Summarization (copying the article) and code editing (copying the file) draft best, chat less,
German-to-English translation least (little to copy); a second MT-bench turn, which can copy its
first answer, beats the first. Measured as committed tokens per verify step, pooled per group.
"""

import json
import subprocess
import sys

import pytest

from specplan.acceptance.drafters import DrafterSettings, replay_trace
from specplan.workloads import load_workload

CHAT = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}


def _tokens_per_step(steps) -> float:
    return steps["commit"].sum() / len(steps)


@pytest.mark.parametrize("kind", ["sa", "ngram"])
def test_category_ordering(kind):
    settings = DrafterSettings(kind=kind, max_draft_len=5)
    spec = replay_trace(load_workload("specbench"), settings, 5)
    summarization = _tokens_per_step(spec[spec["category"] == "summarization"])
    translation = _tokens_per_step(spec[spec["category"] == "translation"])
    chat = _tokens_per_step(spec[spec["category"].isin(CHAT)])
    code_editing = _tokens_per_step(replay_trace(load_workload("aider"), settings, 5))
    assert summarization > chat and code_editing > chat
    assert chat > translation
    mt = replay_trace(load_workload("mtbench"), settings, 5)
    assert _tokens_per_step(mt[mt["turn"] == 1]) > _tokens_per_step(mt[mt["turn"] == 0])


def test_acceptance_command_by_category_json():
    out = subprocess.run([sys.executable, "-c", "from specplan.cli import main; main()", "acceptance", "mtbench",
                          "--drafter", "sa", "--max-draft-len", "5", "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["k"] == 5
    assert "overall" in json.dumps(data) and "writing" in json.dumps(data)
