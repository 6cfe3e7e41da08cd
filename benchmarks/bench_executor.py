"""Executor speed as users run it: whole ``specplan simulate`` processes, in CPU seconds per output token.

Cases (scenarios under ``benchmarks/scenarios/``):

- ``steady`` (``steady.yaml``): 64 closed-loop clients, i.i.d. acceptance (alpha 0.7, K = 4, SA
  path), 2,000-token outputs. Targets (issue 17), whole process: >= 2,000,000 simulated output tokens
  per CPU-second and >= 200x the simulated GPU's seconds.
- ``realistic-sa`` (``realistic-sa.yaml``): the suffix automaton drafting for real on Spec-Bench,
  8,000 requests at batch 64, roofline H200 / Llama-3.1-8B. Targets: >= 1,500,000 output tokens per
  CPU-second for the whole process, >= 4,000,000 in the loop.
- ``realistic-sa-profile`` (``realistic-sa-profile.yaml``): the same run priced by the calibrated
  model, from a profile in the measured format (a stand-in: the roofline's times at the grid points),
  the path a user's ``specplan calibrate`` profile takes. The same targets.

Each run is a child process, ``python -m specplan simulate SCENARIO --format json``, its CPU time
(user + sys, from ``getrusage(RUSAGE_CHILDREN)``) covering interpreter start, imports, the workload,
the drafters' precompute, the loop, the summary and exit; ``--runs`` runs after one untimed warm-up
(compiled-code caches), min / median / max printed. Only output tokens are counted.

The in-loop figure is apart and labelled so: ``Executor.run`` alone (``loop_timer.LoopTimer``), timed
inside ``--runs`` more children of its own (``--loop-child``), the rest of the process excluded. The
Vidur-shaped scenario is ``benchmarks/bench_vidur.py``.

    python benchmarks/bench_executor.py [--case steady|realistic-sa|realistic-sa-profile|all] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from cpu_clock import ROOT, bad_input, child_cpu, spread

SCENARIOS = ROOT / "benchmarks" / "scenarios"
# case -> (scenario, whole-process tokens per CPU-second target, in-loop target, simulated-time target)
CASES = {
    "steady": ("steady.yaml", 2_000_000, None, 200.0),
    "realistic-sa": ("realistic-sa.yaml", 1_500_000, 4_000_000, None),
    "realistic-sa-profile": ("realistic-sa-profile.yaml", 1_500_000, 4_000_000, None),
}


def loop_child(scenario: str) -> None:
    """Print the loop's CPU seconds and the run's iterations, for one run of ``scenario`` (``--loop-child``)."""
    sys.path.insert(0, str(ROOT))  # this tree's specplan, as the whole-process runs' ``python -m`` finds it
    from loop_timer import LoopTimer
    from specplan.config import load_config
    from specplan.simulator.run import simulate

    timer = LoopTimer()
    result = simulate(load_config(scenario), observe=timer)
    print(json.dumps({"loop_s": timer.seconds[0], "iterations": result.summary["iterations"]}))


def _target(target: float | None, fmt: str = "{:,.0f}") -> str:
    return f"  (target >= {fmt.format(target)})" if target else ""


def measure(case: str, runs: int) -> None:
    """Whole-process runs of ``case``, then the in-loop runs, printed."""
    name, whole_target, loop_target, sim_target = CASES[case]
    scenario = str(SCENARIOS / name)
    argv = ["-m", "specplan", "simulate", scenario, "--format", "json"]
    child_cpu(argv)  # warm-up: compile caches, page cache
    cpus, summary = [], None
    for _ in range(runs):
        cpu, out = child_cpu(argv)
        cpus.append(cpu)
        summary = json.loads(out)
    tokens = summary["output_tokens"]
    simulated = tokens / summary["throughput_tok_s"]
    mid = statistics.median(cpus)
    print(f"{case} ({scenario.removeprefix(str(ROOT) + '/')}): {tokens:,} output tokens, "
          f"{summary['iterations']:,} iterations, {simulated:,.1f} simulated s, "
          f"mean acceptance length {summary['mean_acceptance_length'] or 1:.3f}")
    print(f"  whole process: {spread(cpus)} CPU-s (min / median / max of {runs})")
    print(f"    output tokens per CPU-second (median): {tokens / mid:,.0f}{_target(whole_target)}")
    print(f"    simulated seconds per CPU-second (median): {simulated / mid:,.1f}x"
          f"{_target(sim_target, '{:.0f}x')}")
    loops = [json.loads(child_cpu([__file__, "--loop-child", scenario])[1]) for _ in range(runs)]
    loop = statistics.median(r["loop_s"] for r in loops)
    print(f"  in the loop only (Executor.run, start-up, workload and summary excluded): "
          f"{spread([r['loop_s'] for r in loops])} CPU-s, {loop / loops[0]['iterations'] * 1e6:.1f} us per iteration")
    print(f"    output tokens per CPU-second in the loop (median): {tokens / loop:,.0f}{_target(loop_target)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="all", help="steady, realistic-sa, realistic-sa-profile or all")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--loop-child", metavar="SCENARIO", help=argparse.SUPPRESS)  # the in-loop child
    args = ap.parse_args()
    if args.loop_child:
        loop_child(args.loop_child)
        return
    if args.case != "all" and args.case not in CASES:
        bad_input(f"--case: {args.case!r} is not a case; give steady, realistic-sa, realistic-sa-profile or all")
    if args.runs < 1:
        bad_input("--runs: give a positive number of runs")
    for case in CASES if args.case == "all" else [args.case]:
        measure(case, args.runs)


if __name__ == "__main__":
    main()
