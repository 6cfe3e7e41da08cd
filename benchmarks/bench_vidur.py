"""The Vidur-shaped scenario as users run it: the whole ``specplan simulate`` process, in CPU seconds.

``benchmarks/scenarios/vidur.yaml`` (Llama-2-7B on an A100, vLLM scheduler, 10,000 requests of
512 + 256 tokens at 6 req/s, no speculation, roofline costs) runs as a child process,
``python -m specplan simulate benchmarks/scenarios/vidur.yaml --format json`` (the summary only, no
tables written), ``--runs`` times after one untimed warm-up that fills the compile caches. The
child's CPU time (user + sys, from ``getrusage(RUSAGE_CHILDREN)``) covers interpreter start,
imports, config, workload build, oracle, the loop, metrics and printing. Target: >= 4,000,000
simulated output tokens per CPU-second, the whole process.

A breakdown follows, measured inside one more child with ``time.process_time``: numpy (the console's
set-up, ``specplan.startup``, which loads it), numba import, other imports (the CLI and the run
module: specplan, pydantic, typer, rich, simpy), numba target (its CPU target initialised, as the
first compiled kernel loaded from the cache does), config (parsing the scenario, the cost model, the
scenario's description), build (workload, oracle and kernels loaded, up to the executor about to
run), loop (the executor's run), metrics (tables and summary) and output (printing the summary); the
rest of that child's CPU time, which ends as the console does, is interpreter start and exit
(``python -c pass`` alone is printed beside it). Then a small scenario (``--small`` requests, 200)
as a whole process (best of ``--runs``) less its loop (from the same breakdown): what a command
costs beyond the simulation. Target: <= 0.3 CPU-s. Beside it, the floor any command that runs compiled
code pays (``--floor``, best of ``--runs``): a child set up as the console sets it up that only imports
numpy and numba and calls one cached kernel, so numba's CPU target initialises. One run with an empty numba cache
(``NUMBA_CACHE_DIR`` pointed at a fresh folder) is reported apart.

    python benchmarks/bench_vidur.py [--runs 3] [--requests 10000] [--small 200] [--no-cold]

``--paired [--vidur-python .venv-vidur/bin/python] [--pairs 5]`` runs the paired comparison with
Vidur instead (``benchmarks/vidur_pair.py``: both tools' whole processes, alternately, CPU seconds
per output token, summary only and with default outputs).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from cpu_clock import ROOT, child_cpu

SCENARIO = ROOT / "benchmarks" / "scenarios" / "vidur.yaml"


def simulate_argv(requests: int) -> list[str]:
    return ["-m", "specplan", "simulate", str(SCENARIO), "--format", "json",
            "--set", f"workload.num_requests={requests}"]


def breakdown(requests: int) -> dict:
    """Phase CPU seconds of one in-process ``specplan simulate`` (run in a fresh child by ``--breakdown``).

    The command runs through the console's own entry point; ``simulator.run.simulate`` is wrapped
    to mark when it starts, when the executor is about to run (its ``observe`` hook), when the loop
    returns and when the tables and summary are done.
    """
    marks = {"start": time.process_time()}
    from specplan import startup

    startup.one_blas_thread()  # as the console sets the process up (``specplan.entry``)
    startup.pause_collector()
    startup.load_scipy_blas()  # imports numpy
    marks["numpy"] = time.process_time()
    import numba  # noqa: F401

    marks["numba import"] = time.process_time()
    import specplan.cli
    from specplan.simulator import run

    marks["imported"] = time.process_time()
    from specplan.simulator.control import verified_width

    verified_width(0, 0, 0, 0)  # a cached kernel: numba's CPU target initialises first
    marks["numba"] = time.process_time()
    simulate = run.simulate

    def marked_simulate(cfg, cost=None, observe=None, **kwargs):
        marks.setdefault("simulate", time.process_time())

        def timed(ex) -> None:
            marks["built"] = time.process_time()
            loop = ex.run

            def timed_loop():
                trace = loop()
                marks["looped"] = time.process_time()
                return trace

            ex.run = timed_loop
            if observe is not None:
                observe(ex)

        result = simulate(cfg, cost, observe=timed, **kwargs)
        marks["summarized"] = time.process_time()
        return result

    run.simulate = marked_simulate
    with contextlib.redirect_stdout(io.StringIO()):
        specplan.cli.main(simulate_argv(requests)[2:])
    marks["done"] = time.process_time()
    return {"numpy": marks["numpy"] - marks["start"], "numba import": marks["numba import"] - marks["numpy"],
            "other imports": marks["imported"] - marks["numba import"],
            "numba target": marks["numba"] - marks["imported"],
            "config": marks["simulate"] - marks["numba"],
            "build": marks["built"] - marks["simulate"], "loop": marks["looped"] - marks["built"],
            "metrics": marks["summarized"] - marks["looped"], "output": marks["done"] - marks["summarized"]}


def floor() -> None:
    """What any process that runs one compiled kernel costs (run in a fresh child by ``--floor``): the
    console's set-up, numpy, numba's import and its CPU target, initialised as a cached kernel loads."""
    from specplan import startup

    startup.one_blas_thread()
    startup.pause_collector()
    startup.load_scipy_blas()
    from specplan.simulator.control import verified_width

    verified_width(0, 0, 0, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--small", type=int, default=200, help="requests of the small scenario (overhead beyond the loop)")
    ap.add_argument("--no-cold", action="store_true", help="skip the empty-numba-cache run")
    ap.add_argument("--breakdown", action="store_true", help=argparse.SUPPRESS)  # the in-process child
    ap.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)  # the one-kernel child
    # the paired comparison with Vidur (vidur_pair.py)
    ap.add_argument("--paired", action="store_true", help="alternate whole-process runs of specplan and Vidur")
    ap.add_argument("--vidur-python", default=".venv-vidur/bin/python",
                    help="Vidur's interpreter, relative to the repository (with --paired)")
    ap.add_argument("--pairs", type=int, default=5, help="pairs per variant (with --paired)")
    args = ap.parse_args()
    if args.paired:
        from vidur_pair import paired

        paired(args.vidur_python, args.pairs, args.requests)
        return
    if args.floor:
        sys.path.insert(0, str(ROOT))
        floor()
        os._exit(0)
    if args.breakdown:
        sys.path.insert(0, str(ROOT))  # this tree's specplan, as ``python -m`` from ROOT finds it
        print(json.dumps(breakdown(args.requests)), flush=True)
        os._exit(0)  # as the console ends (specplan.cli.console): no interpreter teardown

    child_cpu(simulate_argv(args.requests))  # warm-up: compile caches, page cache
    cpus, summary = [], None
    for _ in range(args.runs):
        cpu, out = child_cpu(simulate_argv(args.requests))
        cpus.append(cpu)
        summary = json.loads(out)
    tokens = summary["output_tokens"]
    makespan = tokens / summary["throughput_tok_s"]
    best = min(cpus)
    print(f"scenario: {SCENARIO.relative_to(ROOT)}, {args.requests} requests, {tokens} output tokens, "
          f"{summary['iterations']} iterations, {makespan:.1f} simulated s")
    print(f"whole process CPU seconds: {', '.join(f'{c:.3f}' for c in cpus)} (best {best:.3f})")
    print(f"tokens per CPU-second: {tokens / best:,.0f}  (target >= 4,000,000)")
    print(f"simulated seconds per CPU-second: {makespan / best:,.1f}x")

    start, _ = child_cpu(["-c", "pass"])
    whole, out = child_cpu([str(Path(__file__).resolve()), "--breakdown", "--requests", str(args.requests)])
    parts = json.loads(out)
    # what the child spent outside the marked phases: interpreter start and exit (freeing the run)
    rest = whole - sum(parts.values())
    print(f"breakdown (CPU-s, one run): " + ", ".join(f"{k} {v:.3f}" for k, v in parts.items())
          + f"; interpreter start and exit {rest:.3f} (an empty interpreter: {start:.3f})")
    small = min(child_cpu(simulate_argv(args.small))[0] for _ in range(args.runs))
    small_parts = json.loads(child_cpu([str(Path(__file__).resolve()), "--breakdown", "--requests", str(args.small)])[1])
    print(f"small scenario ({args.small} requests): {small:.3f} CPU-s whole process, "
          f"{small - small_parts['loop']:.3f} beyond the loop (target <= 0.3)")
    one_kernel = min(child_cpu([str(Path(__file__).resolve()), "--floor"])[0] for _ in range(args.runs))
    print(f"floor: a process that only loads numpy, numba and one cached kernel: {one_kernel:.3f} CPU-s "
          f"(an empty interpreter: {start:.3f})")

    if not args.no_cold:
        with tempfile.TemporaryDirectory() as cache:
            cpu, _ = child_cpu(simulate_argv(args.requests), env={**os.environ, "NUMBA_CACHE_DIR": cache})
        print(f"empty numba cache: {cpu:.3f} CPU-s whole process ({tokens / cpu:,.0f} tokens per CPU-second)")


if __name__ == "__main__":
    main()
