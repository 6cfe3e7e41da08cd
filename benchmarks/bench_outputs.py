"""What writing a run's tables costs: the whole ``specplan simulate ... --out DIR`` process, in CPU seconds.

Each row runs ``python -m specplan simulate SCENARIO --format json`` as a child process, ``--runs``
times after one untimed warm-up (compile caches, page cache), best kept, CPU time user + sys from
``getrusage(RUSAGE_CHILDREN)``:

- ``no --out``: the summary only, no files;
- ``--out``: the default outputs, Parquet tables (``simulator/table_files.py``) and summary;
- ``--out --csv``: CSV tables as well;
- ``before``: the tables as they were written before, through pandas as Parquet and CSV
  (``DataFrame.to_parquet`` and ``DataFrame.to_csv``, the old ``SimResult.save``, patched in).

Scenarios: ``benchmarks/scenarios/vidur.yaml`` (10,000 requests of 512 + 256 tokens, no speculation:
2.56 M emission rows) and the same shape speculating (vLLM n-gram, K = 4, i.i.d. acceptance 0.7).
Target (issue 17): with its default outputs written specplan at least 15x Vidur, which takes about
26 CPU-s with its own default outputs on this shape: the Vidur shape with ``--out`` under 1.73 CPU-s,
aimed at 1.2.

    python benchmarks/bench_outputs.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from cpu_clock import ROOT, child_cpu

SCENARIO = ROOT / "benchmarks" / "scenarios" / "vidur.yaml"
SPECULATING = ["--set", "speculation.decoding_type=vllm_ngram", "--set", "speculation.max_draft_len=4",
               "--set", "acceptance.mode=alpha", "--set", "acceptance.alpha=0.7"]
VIDUR_CPU_S = 26.0
TARGET_CPU_S = VIDUR_CPU_S / 15


def pandas_save(self, out_dir, csv: bool = False) -> Path:
    """``SimResult.save`` as it was: every table through pandas, as Parquet and as CSV; then the summary
    and config."""
    import json

    from specplan.atomic import atomic_write
    from specplan.simulator import metrics
    from specplan.simulator.run import dump_config

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("requests", "iterations", "emissions"):
        df = getattr(self, name)
        atomic_write(out / f"{name}.parquet", lambda p, df=df: df.to_parquet(p, index=False))
        atomic_write(out / f"{name}.csv", lambda p, df=df: df.to_csv(p, index=False))
    atomic_write(out / "summary.json", lambda p: Path(p).write_text(json.dumps(
        metrics.plain({"description": self.description, **self.summary}), indent=2)))
    atomic_write(out / "config.yaml", lambda p: Path(p).write_text(dump_config(self.config)))
    return out


def run_before(argv: list[str]) -> None:
    """``specplan simulate ARGV`` in this process with the old save (the ``--before`` child)."""
    from specplan.cli import main
    from specplan.simulator.run import SimResult

    SimResult.save = pandas_save
    main(argv)


def measure(args: list[str], runs: int, before: bool = False) -> float:
    """Best child CPU seconds of ``runs`` runs of ``simulate`` with ``args``, each into a fresh folder."""
    best = float("inf")
    for i in range(runs + 1):
        with tempfile.TemporaryDirectory() as tmp:
            full = [a.replace("{out}", str(Path(tmp) / "out")) for a in args]
            if before:  # a script's child: the tree's own package on its path, as -m gives the others
                cpu, _ = child_cpu([str(Path(__file__).resolve()), "--before", *full],
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
            else:
                cpu, _ = child_cpu(["-m", "specplan", *full])
        if i:  # the first is the warm-up
            best = min(best, cpu)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)  # the old-save child
    args = ap.parse_args()
    if args.before is not None:
        run_before(args.before)
        return
    print(f"whole-process CPU seconds, best of {args.runs} (user + sys)")
    print(f"{'scenario':<14}{'no --out':>10}{'--out':>10}{'--out --csv':>13}{'before':>10}{'before/--out':>14}")
    for label, extra in (("vidur", []), ("speculating", SPECULATING)):
        base = ["simulate", str(SCENARIO), "--format", "json", *extra]
        figures = [measure(base, args.runs), measure([*base, "--out", "{out}"], args.runs),
                   measure([*base, "--out", "{out}", "--csv"], args.runs),
                   measure([*base, "--out", "{out}"], args.runs, before=True)]
        print(f"{label:<14}" + "".join(f"{x:>{w}.2f}" for x, w in zip(figures, (10, 10, 13, 10)))
              + f"{figures[3] / figures[1]:>13.1f}x")
        if label == "vidur":
            vidur_out = figures[1]
    print(f"target: the Vidur shape with --out under {TARGET_CPU_S:.2f} CPU-s (Vidur ~{VIDUR_CPU_S:.0f} CPU-s / 15; "
          f"aim 1.2): {vidur_out:.2f} CPU-s, {VIDUR_CPU_S / vidur_out:.1f}x Vidur")


if __name__ == "__main__":
    sys.exit(main())
