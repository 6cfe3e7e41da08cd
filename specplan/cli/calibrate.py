"""``specplan calibrate``: benchmark a model's decoder stack on this device and write a profile.

Needs torch (``pip install 'specplan[calibrate]'``); it is imported only when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from specplan.cli.choices import Device


def calibrate(
    model: Optional[str] = typer.Option(None, "--model", metavar="MODEL", help="Catalogue model (llama-3.1-8b, tiny, ...) or a config.json."),
    out: Path = typer.Option(..., "--out", metavar="DIR", help="Directory for measurements.csv, meta.yaml and profile.yaml."),
    tp: int = typer.Option(1, "--tp", metavar="N", min=1, help="Tensor parallelism: measure one GPU's shard."),
    device: Device = typer.Option(Device.cuda, "--device", case_sensitive=False, help="cpu: use --model tiny."),
    budget_s: float = typer.Option(480.0, "--budget-s", metavar="SECONDS", min=1.0, help="Wall-clock budget of the whole command."),
    layers: Optional[int] = typer.Option(None, "--layers", metavar="N", min=1, help="Override the model's layer count."),
    name: Optional[str] = typer.Option(None, "--name", metavar="NAME", help="Profile name (default GPU/MODEL, or GPU/MODEL/tpN under TP)."),
    repeats: int = typer.Option(3, "--repeats", metavar="N", min=1, help="Interleaved passes over the grid."),
    passes: Optional[int] = typer.Option(None, "--passes", metavar="N", min=1,
                                         help="Measure every point exactly N times, with no time budget."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", metavar="N", min=1, help="Extend the grid to prefill chunks "
                                             "of this many tokens (the largest step the scenario runs)."),
    max_context: Optional[int] = typer.Option(None, "--max-context", metavar="TOKENS", min=1,
                                              help="Extend the grid to this context (the longest sequence the scenario runs)."),
    heldout: float = typer.Option(0.25, "--heldout", metavar="FRACTION", min=0.05, max=0.5, help="Fraction of points held out."),
    threads: Optional[int] = typer.Option(None, "--threads", metavar="N", min=1, help="CPU threads (cpu device; default 1)."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Grid order, weights, held-out split."),
    draft_bench: bool = typer.Option(True, "--draft-bench/--no-draft-bench",
                                     help="Also time the NGram host pool on this CPU."),
    sa_kernel: bool = typer.Option(True, "--sa-kernel/--no-sa-kernel",
                                   help="On CUDA, also time the Triton SA drafting kernel (a quarter of the budget)."),
    host_bench: bool = typer.Option(False, "--host-bench/--no-host-bench",
                                    help="Also time vLLM's scheduler per step beside the forward (needs vLLM): the "
                                         "profile's host terms. On the CPU the command then runs in the engine's environment."),
    from_logs: list[Path] = typer.Option([], "--from-logs", metavar="FILE", help="Instead of measuring: fit acceptance (and a linear "
                                         "cost) from vLLM /metrics text or TensorRT-LLM iteration stats (repeatable); "
                                         "from a step log (validate --engine vllm's engine_steps.csv): a step-time profile."),
    holdout: Optional[str] = typer.Option(None, "--holdout", metavar="SPLIT", help="Step-time fit: the steps checked, not fitted: "
                                          "alternate (every other step; the default for a step log) or first-half "
                                          "(fit the first half); on TensorRT-LLM iteration stats, asks for the step-time fit."),
) -> None:
    """Measure step times over 1-D sweeps (tokens, batch, K, context, chunk), fit a profile, print gamma(B);
    or, with --from-logs, fit acceptance and step cost from an engine's own logs."""
    if from_logs:
        import json

        from specplan.calibration.from_logs import calibrate_from_logs

        print(json.dumps(calibrate_from_logs(from_logs, out, holdout), indent=2))
        return
    if model is None:
        from specplan.errors import ConfigError

        raise ConfigError("--model: required to measure a model (or give --from-logs FILE to fit from engine logs)")
    from specplan.calibration.runner import run_calibration
    from specplan.outputs import check_output_dir

    check_output_dir(out)  # before measuring: a bad --out must not cost the measurements
    from specplan.validation import vllm_env

    # vLLM's scheduler is timed in the engine's environment (the host time depends on it); so is a CPU
    # stack wherever vLLM is installed, as it runs the CPU engine's GEMMs (``cpu_gemm``)
    engine_gemm = str(device) == "cpu" and vllm_env.importable()
    if host_bench or engine_gemm:
        vllm_env.enter_engine_process("--host-bench", str(device), threads)
    run_calibration(model, out, tp=tp, device=str(device), budget_s=budget_s, layers=layers, name=name, seed=seed,
                    repeats=repeats, heldout_fraction=heldout, threads=threads, draft_bench_on=draft_bench, sa_kernel_on=sa_kernel,
                    passes=passes, max_tokens=max_tokens, max_context=max_context, host_bench_on=host_bench,
                    engine_gemm=engine_gemm)


def register(app: typer.Typer) -> None:
    app.command()(calibrate)
