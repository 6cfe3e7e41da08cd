"""What the command-line tests share: a small synthetic scenario and the console entry point as a process."""

from __future__ import annotations

import subprocess
import sys

SMALL = {
    "seed": 1,
    "engine": {"max_batch_size": 4, "kv_num_blocks": 20000},
    "speculation": {"decoding_type": "NGram", "max_draft_len": 3},
    "acceptance": {"mode": "alpha", "alpha": 0.6},
    "workload": {"trace": None, "arrival": "poisson", "rate": 40.0, "num_requests": 12, "prompt_len": 16,
                 "output_len": 10},
    "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.1},
}


def run_cli(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    """``specplan ARGS...`` in a fresh interpreter (this tree's code), output captured as text."""
    return subprocess.run([sys.executable, "-c", "from specplan.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def run_main(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """``specplan ARGS...`` in this process (``specplan.cli.main``): exit code, stdout, stderr."""
    from specplan.cli import main

    monkeypatch.setattr(sys, "argv", ["specplan", *map(str, args)])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err
