"""specplan against Vidur on the Vidur-shaped scenario: paired whole-process runs, CPU seconds per output token.

Both tools simulate one A100 serving Llama-2-7B behind vLLM's scheduler (batch size cap 128, 4,096
tokens a batch), 10,000 synthetic requests of 512 prompt + 256 output tokens arriving as a Poisson
process at 6 req/s, seed 0: specplan as ``python -m specplan simulate benchmarks/scenarios/vidur.yaml``,
Vidur 0.0.26 as ``python -m vidur.main`` with the arguments of ``vidur_argv`` from its own virtual
environment (``.venv-vidur``; its operator profiles are written by ``vidur_profile.py``). Each run is
a child process; its CPU time (user + sys of it and of every descendant, those it leaves running
included: kaleido's Chrome, which draws Vidur's plots) comes from ``getrusage(RUSAGE_CHILDREN)``
(``cpu_clock.child_cpu``), and the part in processes Vidur left running is printed apart. The runs
alternate (specplan first in odd pairs, Vidur first in even ones) so that drift in the machine's
speed falls on both alike, after one untimed warm-up run of each (specplan's compiled-code cache;
Vidur's trained predictors and their predictions, cached under ``.venv-vidur/vidur_cache``).

A pair's ratio is Vidur's CPU seconds per output token over specplan's, each tool counting its own
completed output tokens (specplan's summary; Vidur's completed requests' decode tokens, printed by
the few lines of ``VIDUR_MAIN`` around ``vidur.main``'s own three). Two variants:

- summary only: specplan ``--format json``; Vidur with its metrics (CSVs and plots) and Chrome trace
  off (``--no-metrics_config_write_metrics --no-metrics_config_enable_chrome_trace``; wandb is off
  unless a project is named);
- default outputs: specplan ``--out DIR`` (its tables and summary) against Vidur's defaults (request,
  batch and utilization metrics as CSV, their plots as PNG, drawn by kaleido through a Chrome it
  needs installed, e.g. ``apt-get install chromium``, and the Chrome trace), each into a fresh
  temporary folder.

Targets (issue): Vidur / specplan >= 30x per output token summary only, >= 15x with default outputs;
specplan alone >= 4,000,000 output tokens per CPU-second.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from cpu_clock import ROOT, ChildFailed, bad_input, child_cpu, child_cpu_split, spread
from vidur_profile import COMPUTE_DATASET, MODEL, NETWORK_DATASET, NETWORK_DEVICE, write_profiles

SCENARIO = ROOT / "benchmarks" / "scenarios" / "vidur.yaml"
VIDUR_VENV = ROOT / ".venv-vidur"
VIDUR_CACHE = VIDUR_VENV / "vidur_cache"
MAKE_VENV = "python -m venv .venv-vidur && .venv-vidur/bin/pip install vidur==0.0.26"
WARMUP_REQUESTS = 200
PLOT_TRIES = 3
TARGET_SUMMARY, TARGET_OUTPUTS, TARGET_TOKENS = 30.0, 15.0, 4_000_000

# vidur.main's body, then its own count of what it completed (one JSON line, last on stdout).
VIDUR_MAIN = """\
import json
from vidur.config import SimulationConfig
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds
config = SimulationConfig.create_from_cli_args()
set_seeds(config.seed)
simulator = Simulator(config)
requests = [event._request for _, event in simulator._event_queue]
simulator.run()
done = [r for r in requests if r.completed]
print(json.dumps({"completed_requests": len(done), "output_tokens": sum(r.num_decode_tokens for r in done),
                  "makespan_s": simulator._time}))
"""


def vidur_argv(requests: int, out_dir: str, outputs: bool) -> list[str]:
    """Vidur's command line for the scenario; ``outputs`` leaves its default outputs on."""
    p = "--random_forrest_execution_time_predictor_config_"
    argv = [
        "--seed", "0",
        "--replica_config_device", "a100", "--replica_config_network_device", NETWORK_DEVICE,
        "--replica_config_model_name", MODEL,
        # Vidur's defaults are 8-way tensor and 2-stage pipeline parallelism: one GPU here
        "--replica_config_num_pipeline_stages", "1", "--replica_config_tensor_parallel_size", "1",
        "--replica_scheduler_config_type", "vllm",
        "--vllm_scheduler_config_batch_size_cap", "128", "--vllm_scheduler_config_max_tokens_in_batch", "4096",
        "--request_generator_config_type", "synthetic",
        "--synthetic_request_generator_config_num_requests", str(requests),
        "--synthetic_request_generator_config_seed", "0",
        "--length_generator_config_type", "fixed",
        "--fixed_request_length_generator_config_prefill_tokens", "512",
        "--fixed_request_length_generator_config_decode_tokens", "256",
        "--interval_generator_config_type", "poisson",
        "--poisson_request_interval_generator_config_qps", "6", "--poisson_request_interval_generator_config_seed", "0",
        "--execution_time_predictor_config_type", "random_forrest",
        p + "model_profiling_dataset", COMPUTE_DATASET, p + "network_profiling_dataset", NETWORK_DATASET,
        p + "cache_dir", str(VIDUR_CACHE),
        # predictions up to Llama-2-7B's context (the default, 2 Mi tokens, tabulates 2 M rows per operator)
        p + "prediction_max_tokens_per_request", "4096",
        # one point of the default grid search, so the one-off training takes seconds, not an hour
        p + "num_estimators", "250", p + "max_depth", "8", p + "min_samples_split", "2",
        "--metrics_config_output_dir", out_dir,
    ]
    if not outputs:
        argv += ["--no-metrics_config_write_metrics", "--no-metrics_config_enable_chrome_trace"]
    return argv


def specplan_argv(requests: int, out_dir: str | None) -> list[str]:
    """``specplan simulate`` of the scenario: the JSON summary, or with ``out_dir`` the default ``--out`` tables."""
    argv = ["-m", "specplan", "simulate", str(SCENARIO), "--set", f"workload.num_requests={requests}"]
    return argv + (["--out", out_dir] if out_dir else ["--format", "json"])


def run_specplan(requests: int, outputs: bool) -> tuple[float, dict]:
    """(CPU seconds, summary) of one specplan run; with ``outputs`` the summary is read from ``--out``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "out") if outputs else None
        cpu, stdout = child_cpu(specplan_argv(requests, out))
        summary = json.loads((Path(out) / "summary.json").read_text()) if outputs else json.loads(stdout)
    return cpu, summary


def run_vidur(python: str, requests: int, outputs: bool) -> tuple[float, dict]:
    """(CPU seconds, Vidur's own counts) of one Vidur run, its outputs into a temporary folder.

    A run whose plotting fails in kaleido's page script (``kaleido_scopes is not defined``: Chrome
    sometimes runs the export before the page's script has loaded, more often on a loaded machine)
    is run again, up to ``PLOT_TRIES`` times; only the run that completes is counted.
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # its profiles are in the local cache (vidur_profile.py)
    for attempt in range(1, PLOT_TRIES + 1):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                own, left, stdout = child_cpu_split(["-c", VIDUR_MAIN, *vidur_argv(requests, tmp, outputs)],
                                                    env=env, python=python, cwd=Path(tmp), name="vidur.main")
                return own + left, {**json.loads(stdout.strip().splitlines()[-1]), "left_behind_cpu_s": left}
            except ChildFailed as failed:
                if "requires Google Chrome" in str(failed):
                    bad_input(f"Vidur's plots need Chrome for kaleido: apt-get install chromium "
                              f"(or run {Path(python).parent / 'plotly_get_chrome'})")
                if "kaleido_scopes" not in str(failed) or attempt == PLOT_TRIES:
                    raise
                print(f"    (Vidur's plot export failed in kaleido, try {attempt} of {PLOT_TRIES}; running it again)")


def ratio(row: tuple[float, dict, float, dict]) -> float:
    """Vidur's CPU seconds per output token over specplan's, for one pair."""
    scpu, summary, vcpu, vidur = row
    return (vcpu / vidur["output_tokens"]) / (scpu / summary["output_tokens"])


def pair_runs(python: str, requests: int, pairs: int, outputs: bool) -> list[tuple[float, dict, float, dict]]:
    """``pairs`` alternating runs of both tools: (specplan CPU-s, its summary, Vidur CPU-s, Vidur's counts) each."""
    rows = []
    for i in range(pairs):
        if i % 2:
            vcpu, vidur = run_vidur(python, requests, outputs)
            scpu, summary = run_specplan(requests, outputs)
        else:
            scpu, summary = run_specplan(requests, outputs)
            vcpu, vidur = run_vidur(python, requests, outputs)
        rows.append((scpu, summary, vcpu, vidur))
        print(f"    pair {i + 1}: specplan {scpu:.2f} CPU-s, Vidur {vcpu:.2f} CPU-s, "
              f"{ratio(rows[-1]):.1f}x per output token", flush=True)
    return rows


def report(label: str, rows: list, target: float) -> None:
    """Per-variant figures: CPU seconds of each tool, specplan's tokens per CPU-second, the ratios."""
    ratios = [ratio(row) for row in rows]
    rates = [summary["output_tokens"] / s for s, summary, _, _ in rows]
    print(f"  {label}: specplan {spread([r[0] for r in rows])} CPU-s, Vidur {spread([r[2] for r in rows])} CPU-s "
          f"(min / median / max; of Vidur's, in processes it left running, such as kaleido's Chrome: "
          f"{spread([r[3]['left_behind_cpu_s'] for r in rows])})")
    print(f"    specplan output tokens per CPU-second: {spread(rates, '{:,.0f}')}  (target >= {TARGET_TOKENS:,})")
    print(f"    Vidur / specplan per output token: {spread(ratios, '{:.1f}x')}  (target >= {target:.0f}x)")


def paired(vidur_python: str, pairs: int, requests: int) -> None:
    """The paired benchmark (``bench_vidur.py --paired``)."""
    # absolute, not resolved: the venv's python is a link whose target would lose the venv
    vidur_python = os.path.join(ROOT, vidur_python)
    if not Path(vidur_python).exists():
        bad_input(f"--vidur-python: {vidur_python} not found; make Vidur's environment in the repository "
                  f"with: {MAKE_VENV}")
    if pairs < 1 or requests < 1:
        bad_input("--pairs, --requests: give positive numbers")
    write_profiles(VIDUR_CACHE)
    print(f"warm-up ({WARMUP_REQUESTS} requests each; Vidur's first run ever trains its predictors, a minute or two)",
          flush=True)
    run_specplan(WARMUP_REQUESTS, outputs=False)
    run_vidur(vidur_python, WARMUP_REQUESTS, outputs=False)
    for outputs, label, target in ((False, "summary only", TARGET_SUMMARY), (True, "default outputs", TARGET_OUTPUTS)):
        print(f"{label}, {pairs} pairs of {requests:,} requests:", flush=True)
        rows = pair_runs(vidur_python, requests, pairs, outputs)
        _, summary, _, vidur = rows[0]
        tokens = summary["output_tokens"]
        print(f"  {SCENARIO.relative_to(ROOT)} against Vidur 0.0.26: output tokens completed: specplan {tokens:,}, "
              f"Vidur {vidur['output_tokens']:,}; simulated makespan: specplan "
              f"{tokens / summary['throughput_tok_s']:.0f} s, Vidur {vidur['makespan_s']:.0f} s")
        report(label, rows, target)
