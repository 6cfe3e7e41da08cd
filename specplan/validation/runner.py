"""``specplan validate``: simulate each scenario, replay its iterations on the device, compare, report.

Steps: load the profile (one line naming the problem when it is unusable); for each scenario build
the config priced by the profile, simulate it recording every step's batch, and compute the predicted
terms per iteration; build one decoder stack for the profile's model (its real shapes, the profile's
dtype and layer count, random weights) with KV room for the largest scenario; replay each scenario
(``validation.replay``) with its drafter; compare and write the report (``report``).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from specplan.config import SimConfig
from specplan.config_rules import NEURAL_DRAFTERS
from specplan.cost_models.models import ModelSpec, get_model
from specplan.cost_models.profile import ProfileFile
from specplan.cost_models.registry import load_profile, make_cost_model
from specplan.errors import SpecplanError
from specplan.simulator.run import resolve, simulate
from specplan.validation import compare
from specplan.validation.report import ScenarioResult, write_outputs
from specplan.validation.scenarios import BUNDLED, scenario_config
from specplan.validation.schedule import steps_from_run
from specplan.workloads.traffic import build_requests


# The simulation's own headline figures, kept beside the comparison (its predicted side re-derives them).
_SIMULATED = ("iterations", "completed_requests", "output_tokens", "throughput_tok_s", "tpot_s", "itl_s",
              "mean_acceptance_length")


@dataclass
class _Prepared:
    """A simulated scenario waiting for its replay."""

    label: str
    cfg: SimConfig
    requests: list
    result: object
    steps: list
    predicted: object
    oracle: object
    warnings: list[str]


@dataclass(frozen=True)
class ValidationResult:
    """What a validation wrote, and its per-scenario results."""

    out: Path
    scenarios: list[ScenarioResult]


def _model_for(profile: ProfileFile, model: Optional[str]) -> ModelSpec:
    """The replayed model: ``--model``, else the profile's; its layer count is the profile's."""
    name = model or (profile.model_shape.name if profile.model_shape is not None else profile.model)
    spec = get_model(name)
    shape = profile.model_shape
    if shape is None:
        return spec
    if (spec.hidden, spec.vocab) != (shape.hidden, shape.vocab):
        raise SpecplanError(f"--model {name}: hidden {spec.hidden}, vocab {spec.vocab} do not match the profile's "
                            f"{shape.name} (hidden {shape.hidden}, vocab {shape.vocab})")
    return dataclasses.replace(spec, num_layers=shape.num_layers)


def _prepare(scenario: str, device: str, profile_ref: str, model: ModelSpec) -> _Prepared:
    label, cfg = scenario_config(scenario, device, profile_ref, model.name)
    sp = resolve(cfg).speculation
    if sp.decoding_type in NEURAL_DRAFTERS or sp.sa_config is not None:
        raise SpecplanError(f"scenario {label}: model-based drafters ({', '.join(NEURAL_DRAFTERS)}) are not replayed; "
                            "use a model-free drafter (SA, NGram, ...)")
    requests = build_requests(cfg.workload, cfg.seed)
    oracle = None
    if sp.decoding_type != "none":
        from specplan.acceptance.drafters import make_drafter_oracle

        oracle = make_drafter_oracle(sp, requests, cfg.engine.max_batch_size)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cost = make_cost_model(cfg.cost)
        result = simulate(cfg, cost=cost, requests=requests, record_batches=True)
        prompt_lens = np.array([r.prompt_len for r in requests], dtype=np.int64)
        steps = steps_from_run(result.batches, result.iterations, prompt_lens,
                               bool(oracle is not None and oracle.drafts_at_prefill))
        predicted = compare.predicted_terms(cfg, cost, steps, result.iterations)
    # The cost model's own warnings (a batch outside the profile's measured range), not library noise.
    notes = list(dict.fromkeys(str(w.message) for w in caught if w.category is UserWarning))
    return _Prepared(label, cfg, requests, result, steps, predicted, oracle, notes)


def _drafter(rp, prep: _Prepared, plan, device: str):
    """The replay's drafter for a scenario: the SA GPU kernel on CUDA, else the simulator's drafter on the host."""
    if prep.oracle is None:
        return None
    sp = resolve(prep.cfg).speculation
    if device == "cuda" and sp.decoding_type == "SA" and not sp.enable_global_pool:
        max_k = max([s.k for s in prep.steps] + [1])
        return rp.SAKernelDrafter(prep.requests, plan.num_slots, prep.cfg.engine.max_batch_size, max_k,
                                  rp.sa_max_ngram(prep.oracle.settings.ngram_size), device)
    clock = rp.host_clock(device)
    what = (f"{type(prep.oracle).__name__}.propose on the host "
            f"({'thread CPU time' if device != 'cuda' else 'wall clock'})")
    return rp.HostDrafter(prep.oracle, clock, what)


def run_validation(profile: str, out: str | Path, *, device: str = "cuda", scenarios: Sequence[str] = BUNDLED,
                   model: Optional[str] = None, threads: Optional[int] = None, seed: int = 0, warmup: int = 3,
                   attention: str = "auto", console=None) -> ValidationResult:
    """Run the whole validation (see the module docstring) and write its report under ``out``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    t0 = time.monotonic()
    console = console or Console(stderr=True)
    if device not in ("cuda", "cpu"):
        raise SpecplanError(f"--device: {device!r} is not cuda or cpu")
    if attention not in ("auto", "rows"):
        raise SpecplanError(f"--attention: {attention!r} is not auto or rows")
    prof, source = load_profile(profile)
    if prof.tp != 1:
        raise SpecplanError(f"profile {profile}: TP {prof.tp}; the replay runs one GPU, so validate takes TP 1 "
                            "profiles")
    spec = _model_for(prof, model)
    profile_ref = str(Path(profile).resolve()) if Path(profile).is_file() else profile
    if not scenarios:
        raise SpecplanError("--scenario: give at least one scenario")

    try:
        from specplan.validation import replay as rp
    except ImportError:
        raise SpecplanError("validate needs torch: pip install 'specplan[calibrate]'") from None
    base = rp.ReplaySettings(device=device, dtype=prof.dtype, threads=threads or 1, seed=seed, warmup=warmup,
                             attention=attention)
    rp.check_settings(base)

    console.print(f"[bold]validate[/] profile {prof.name} ({source}), {spec.name} ({spec.num_layers} layers), "
                  f"{prof.dtype} on {device}; scenarios {', '.join(scenarios)}")
    prepared = [_prepare(s, device, profile_ref, spec) for s in scenarios]
    for p in prepared:
        console.print(f"  {p.label}: {len(p.steps)} iterations simulated, "
                      f"{int(p.result.summary['completed_requests'])} requests")
    plans = [rp.plan_slots(p.steps) for p in prepared]
    stack = rp.build_stack(spec, base, max(plan.kv_tokens for plan in plans))
    info = rp.replay_info(base)
    results = []
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        console=console, transient=False)
    with progress:
        for prep, plan in zip(prepared, plans):
            options = prep.cfg.cost
            settings = dataclasses.replace(base, pad_to=options.cuda_graph_max_tokens
                                           if device == "cuda" and options.cuda_graph_padding else None)
            attn, why = rp.make_attention(stack, plan, attention)
            drafter = _drafter(rp, prep, plan, device)
            task = progress.add_task(f"replaying {prep.label}", total=len(prep.steps))
            tokens = [np.asarray(r.tokens) for r in prep.requests]
            measured = rp.replay_steps(stack, prep.steps, plan, attn, tokens, drafter, settings,
                                       lambda n, task=task: progress.update(task, completed=n))
            table = compare.join_measured(prep.predicted, measured)
            output_lens = np.array([r.output_len for r in prep.requests], dtype=np.int64)
            results.append(ScenarioResult(
                label=prep.label, config=prep.cfg, table=table,
                per_iteration=compare.error_stats(table["err"].to_numpy()),
                end_to_end=compare.end_to_end(table, prep.result.iterations, prep.result.emissions, output_lens),
                terms=compare.term_table(table, device == "cuda"), bins=compare.error_bins(table),
                attention=attn.name, attention_fallback=why,
                drafter=getattr(drafter, "what", "none (speculation off)"), padding=settings.pad_to,
                kv_slots={"slots": plan.num_slots, "slot_tokens": plan.slot_len},
                simulated={k: prep.result.summary[k] for k in _SIMULATED}, warnings=prep.warnings))
    meta = {"profile": {"name": prof.name, "source": source, "kind": prof.provenance.kind,
                        "measured_on": prof.provenance.device, "date": prof.provenance.date,
                        "heldout_median_abs_error": prof.provenance.heldout_median_abs_error},
            "model": dataclasses.asdict(spec), "replay": info, "seed": seed,
            "elapsed_s": round(time.monotonic() - t0, 1)}
    out = Path(out)
    write_outputs(out, results, meta)
    for r in results:
        e = r.per_iteration
        console.print(f"{r.label}: median per-iteration error {e['median_ape']:.1%} (p90 {e['p90_ape']:.1%}, "
                      f"bias {e['bias']:+.1%}), throughput error {r.end_to_end['throughput_tok_s']['error']:+.1%}")
    console.print(f"wrote report.md, iterations.csv, predicted_vs_measured.png, summary.json to {out}")
    return ValidationResult(out, results)
