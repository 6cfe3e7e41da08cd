"""Hundreds of malformed inputs, every command: each must exit 2 with exactly one line on stderr that
names the option, field or file, and no traceback; none may hang (each runs under a timer).

Cases run in-process through ``specplan.cli.main`` (the console entry point) so the whole table is
quick; a few run as ``python -m specplan`` to cover the real process boundary.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specplan.cli import main

from malformed_cases import CASES, Files

CASE_TIMEOUT_S = 120  # generous for a loaded machine; a hang, not slowness, is what this catches


@pytest.fixture
def timer():
    """Fail, rather than hang, a case that runs past CASE_TIMEOUT_S."""
    def expire(signum, frame):
        raise TimeoutError(f"no answer within {CASE_TIMEOUT_S} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(CASE_TIMEOUT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _expand(argv: list[str], root: Path) -> list[str]:
    return [a.replace("{root}", str(root)) for a in argv]


def _check(code, err: str, out: str, needle: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"exit {code}; stderr: {err!r}"
    assert "Traceback" not in err + out
    assert len(lines) == 1, f"expected one line, got {lines!r}"
    assert lines[0].startswith("error: "), lines[0]
    assert needle.lower() in lines[0].lower(), f"{needle!r} not named in {lines[0]!r}"


def test_at_least_two_hundred_cases_over_every_command():
    assert len(CASES) >= 200
    assert len({c[0] for c in CASES}) == len(CASES), "case ids must be unique"
    commands = {c[1][0] for c in CASES}
    assert {"simulate", "acceptance", "workloads", "profile", "calibrate", "sweep", "report", "recommend",
            "validate"} <= commands


@pytest.mark.parametrize("cid,argv,files,needle", CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_one_line_exit_2(cid, argv, files, needle, tmp_path, capsys, monkeypatch, timer):
    made = Files(tmp_path)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        made.text(name, text)
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)  # examples/ paths are repo-relative
    with pytest.raises(SystemExit) as exit_info:
        main(_expand(argv, tmp_path))
    captured = capsys.readouterr()
    _check(exit_info.value.code, captured.err, captured.out, needle)


@pytest.mark.parametrize("argv,needle", [
    (["simulat"], "simulat"),
    (["simulate", "--format", "xml"], "--format"),
    (["acceptance", "specbench"], "--drafter"),
    (["validate", "--out", "/nonexistent-dir/never-written"], "--profile"),  # --profile is required without --engine
    (["profile", "show", "h200/llama-3.1-8b", "--context", "-5"], "--context"),
])
def test_the_console_process_too(argv, needle):
    """The real process boundary: ``python -m specplan`` with a typer that bundles its own click."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "specplan", *argv], capture_output=True, text=True, cwd=root,
                          env=env, timeout=CASE_TIMEOUT_S)
    _check(proc.returncode, proc.stderr, proc.stdout, needle)


def test_strict_yaml_refuses_duplicates_but_keeps_merge_overrides():
    from specplan.strict_yaml import strict_load

    assert strict_load("d: &x {e: 1, g: 3}\nf:\n  <<: *x\n  e: 2\n") == {"d": {"e": 1, "g": 3}, "f": {"e": 2, "g": 3}}
    for text, key, first in (("a: 1\nb: 2\na: 3\n", "a", 1), ("x:\n  - {k: 1, k: 2}\n", "k", 2)):
        with pytest.raises(yaml.YAMLError, match=f"duplicate key '{key}' \\(first on line {first}\\)"):
            strict_load(text)
