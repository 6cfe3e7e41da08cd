"""``specplan validate --engine vllm``: the same requests on a real vLLM and in the simulator.

1. Prompts: a token trace (``--trace``, ids in the model's vocabulary), a simulate config's
   workload (``--scenario``), or by default the check set: prompts of the bundled Spec-Bench trace's
   summarisation, RAG and coding categories, decoded with its Llama-2 tokenizer and re-encoded with
   the model's own tokenizer (the last ``max_prompt_tokens`` kept, so the prompt still ends where
   the assistant's answer starts).
2. vLLM, greedy, all requests submitted at once: once without speculation, once with the
   speculative config, recorded per step (``vllm_engine``); the two outputs must be equal.
3. The speculative run's outputs become a token trace (``trace.jsonl``) and specplan simulates it
   with ``engine: vllm``, every request arriving at 0, and vLLM's max_num_seqs, token budget and
   max_model_len.
4. Iteration-by-iteration and request-by-request comparison (``vllm_compare``); outputs
   (``vllm_report``).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Optional

from specplan.errors import SpecplanError
from specplan.workloads.request import Request

CHECK_CATEGORIES = ("summarization", "rag", "coding")
NGRAM_KEYS = {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"}
VALIDATE = "validate --engine vllm"


def parse_speculative_config(text: str) -> dict:
    """vLLM's ``speculative_config`` as JSON; the n-gram drafter is the one specplan replays exactly."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecplanError(f"--speculative-config: not valid JSON ({exc.msg})") from None
    if not isinstance(spec, dict) or spec.get("method") != "ngram":
        raise SpecplanError('--speculative-config: give {"method": "ngram", "num_speculative_tokens": K, ...}')
    unknown = set(spec) - NGRAM_KEYS
    if unknown:
        raise SpecplanError(f"--speculative-config: {', '.join(sorted(unknown))}: not an n-gram setting "
                            f"(use {', '.join(sorted(NGRAM_KEYS))})")
    k = spec.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise SpecplanError("--speculative-config: num_speculative_tokens must be an integer >= 1")
    _speculation(spec)  # the schema config import applies to the same settings (bounds, min <= max)
    return spec


def _speculation(spec: dict):
    """The speculation section of the simulated run (``sim_config``), validated: one line naming the
    setting as vLLM spells it."""
    from pydantic import ValidationError

    from specplan.config import SpeculationConfig, format_validation_error

    section = {"decoding_type": "vllm_ngram", "max_draft_len": spec["num_speculative_tokens"]}
    section.update({key: spec[key] for key in ("prompt_lookup_min", "prompt_lookup_max") if key in spec})
    try:
        return SpeculationConfig.model_validate(section)
    except ValidationError as exc:
        line = format_validation_error(exc, "--speculative-config").replace("max_draft_len", "num_speculative_tokens")
        line = line.replace("<root>: ", "")  # a rule across the settings names them itself
        raise SpecplanError(line) from None


def source_prompts(trace: Optional[str], scenario: Optional[str],
                   num_prompts: int) -> Optional[tuple[list[str], list[list[int]]]]:
    """Request ids and prompt ids of ``--trace`` or ``--scenario``, read and checked (before vLLM is
    imported); None for the check set, which needs the model's tokenizer."""
    if trace is not None and scenario is not None:
        raise SpecplanError("--trace and --scenario: give one of them")
    if trace is not None:
        from specplan.workloads.bundled import bundled_traces, get_bundled
        from specplan.workloads.tokentrace import read_token_trace

        path = get_bundled(trace).path if trace in bundled_traces("workload") else Path(trace)
        if not Path(path).is_file():
            raise SpecplanError(f"--trace: {trace}: no such file and no bundled trace of that name")
        reqs = read_token_trace(path)[:num_prompts]
        return [r.id for r in reqs], [r.prompt_ids.tolist() for r in reqs]
    if scenario is not None:
        from specplan.config import load_config
        from specplan.workloads.traffic import build_requests

        cfg = load_config(scenario)
        reqs = build_requests(cfg.workload, cfg.seed)[:num_prompts]
        return [r.id for r in reqs], [r.prompt_ids.tolist() for r in reqs]
    return None


def check_texts(num_prompts: int) -> list[tuple[str, str]]:
    """(id, text) of the check set: the first prompts of each check category, in trace order."""
    from specplan.workloads.bundled import get_bundled
    from specplan.workloads.tokenization import get_tokenizer
    from specplan.workloads.tokentrace import read_token_trace

    per = math.ceil(num_prompts / len(CHECK_CATEGORIES))
    reqs = read_token_trace(get_bundled("specbench").path)
    chosen = [r for c in CHECK_CATEGORIES for r in [q for q in reqs if q.category == c][:per]][:num_prompts]
    sp = get_tokenizer("llama2").sp
    return [(r.id, sp.decode(r.prompt_ids.tolist())) for r in chosen]


def prompt_ids(model: str, given, num_prompts: int, max_prompt_tokens: int) -> tuple[list[str], list[list[int]]]:
    """Request ids and prompt token ids (see the module docstring, step 1): ``given`` (``source_prompts``)
    or the check set in the model's tokenizer."""
    if given is not None:
        return given
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    texts = check_texts(num_prompts)
    return [i for i, _ in texts], [tok.encode(t)[-max_prompt_tokens:] for _, t in texts]


def _check_vocabulary(model: str, prompts: list[list[int]], option: str) -> None:
    """Prompt ids must be the model's: a trace tokenized for another model is refused, not run."""
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(model).vocab_size
    top = max(max(p) for p in prompts)
    if top >= vocab:
        raise SpecplanError(f"{option}: token id {top} is outside the model's vocabulary ({vocab}); give prompts "
                            "tokenized with this model's tokenizer")


def _check_profile_covers(profile: str, prompts: list[list[int]], max_tokens: int, budget: int) -> None:
    """A measured profile must reach near the run's largest step (its token budget, or all prompts at once)
    and longest sequence (``grid.require_coverage``), before the engine runs."""
    from specplan.calibration.grid import require_coverage
    from specplan.cost_models.registry import load_profile

    prof, source = load_profile(profile)
    if prof.measured_range is not None:
        require_coverage(prof.measured_range, min(budget, sum(map(len, prompts))),
                         max(map(len, prompts)) + max_tokens, f"--profile {source}")


def sim_config(spec: dict, n: int, settings: dict, trace_path: Path, profile: Optional[str] = None):
    """The simulate config of the same requests under ``engine: vllm``: priced by ``profile`` when given
    (the step times are then compared too), else by a placeholder price (the schedule does not depend on it)."""
    from specplan.config import build_config

    section = {"engine": "vllm", "max_batch_size": settings["max_num_seqs"],
               "max_num_tokens": settings["max_num_batched_tokens"], "enable_chunked_prefill": True,
               "capacity_scheduler_policy": "MAX_UTILIZATION", "kv_block_size": settings.get("block_size", 16),
               "kv_num_blocks": 1 << 20, "max_model_len": settings["max_model_len"],
               "enable_prefix_caching": settings.get("enable_prefix_caching", False)}  # as in the engine run
    speculation = {"decoding_type": "vllm_ngram", "max_draft_len": spec["num_speculative_tokens"]}
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        if key in spec:
            speculation[key] = spec[key]
    return build_config({"engine": section, "speculation": speculation, "acceptance": {"mode": "drafter"},
                         "workload": {"trace": str(trace_path), "arrival": "trace", "num_requests": n},
                         "cost": {"model": "profile", "profile": profile} if profile else {"model": "linear_gamma"}},
                        "validate --engine vllm")


def run_check(out: Path, *, model: Optional[str], speculative_config: str, trace: Optional[str] = None,
              scenario: Optional[str] = None, num_prompts: int = 24, max_tokens: int = 96,
              max_prompt_tokens: int = 768, max_model_len: Optional[int] = None, max_num_seqs: int = 24,
              max_num_batched_tokens: int = 8192, device: str = "cpu", threads: Optional[int] = None,
              profile: Optional[str] = None, enable_prefix_caching: bool = False) -> dict:
    """The whole command (module docstring); returns the summary it wrote to ``out/summary.json``."""
    from specplan.validation import vllm_env

    if device not in ("cpu", "cuda"):
        raise SpecplanError(f"--device: {device!r} is not cpu or cuda")
    spec = parse_speculative_config(speculative_config)
    # everything checkable is checked before vLLM (gigabytes, minutes) is imported
    vllm_env.check_model(model)
    given = source_prompts(trace, scenario, num_prompts)
    vllm_env.enter_engine_process(VALIDATE, device, threads)
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise SpecplanError(vllm_env.needs_vllm(VALIDATE)) from None
    from specplan.simulator.run import simulate
    from specplan.validation import vllm_compare as vc
    from specplan.validation.vllm_engine import run_engine
    from specplan.validation.vllm_report import write_outputs
    from specplan.validation.vllm_timing import step_log
    from specplan.workloads.tokentrace import write_token_trace

    folder = vllm_env.model_folder(model)
    ids, prompts = prompt_ids(folder, given, num_prompts, max_prompt_tokens)
    _check_vocabulary(folder, prompts, "--trace" if trace else "--scenario")
    if profile:
        _check_profile_covers(profile, prompts, max_tokens, max_num_batched_tokens)
    common = dict(max_tokens=max_tokens, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                  max_model_len=max_model_len, device=device, enable_prefix_caching=enable_prefix_caching)
    greedy = run_engine(folder, prompts, ids, speculative_config=None, record=False, **common)
    engine = run_engine(folder, prompts, ids, speculative_config=spec, **common)
    same = [rid for rid in ids if greedy.outputs[rid] == engine.outputs[rid]]

    out = Path(out)
    reqs = [Request(id=rid, prompt_ids=p, output_ids=engine.outputs[rid], arrival_s=0.0) for rid, p in zip(ids, prompts)]
    trace_path = write_token_trace(reqs, out / "trace.jsonl")
    with warnings.catch_warnings(record=True) as caught:  # a profile's extrapolation goes in the summary
        warnings.simplefilter("always")
        result = simulate(sim_config(spec, len(reqs), engine.settings, trace_path, profile), requests=reqs,
                          record_batches=True)
    extrapolated = [str(w.message) for w in caught if "outside the measured range" in str(w.message)]
    for w in caught:
        if str(w.message) not in extrapolated:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    e_rows = vc.engine_rows(engine, {r.id: r.prompt_len for r in reqs})
    s_rows = vc.sim_rows(result, ids)
    e_its, s_its = vc.per_iteration(e_rows), vc.per_iteration(s_rows)
    e_req, s_req = vc.per_request(e_rows, ids), vc.per_request(s_rows, ids)
    table, summary = vc.compare(e_its, s_its, e_req, s_req)
    table["engine_step_s"] = list(engine.step_s) + [None] * (len(table) - len(engine.step_s))
    requests = e_req.add_prefix("engine_").join(s_req.add_prefix("sim_"))
    summary = {**summary, "greedy_equal": len(same) == len(ids), "greedy_equal_requests": len(same),
               "model": model or vllm_env.bundled_gguf().name, "device": device, "max_tokens": max_tokens,
               "speculative_config": spec, "engine_settings": engine.settings,
               "engine_wall_s": float(sum(engine.step_s))}
    steps = step_log(e_rows, engine.step_s, engine.host_s)
    if profile:
        from specplan.validation.vllm_timing import timing

        summary["profile"] = profile
        summary["timing"] = timing(steps, engine.step_s, s_rows, result.iterations["step_s"].to_numpy())
        summary["timing"]["extrapolated"] = extrapolated
    write_outputs(out, summary, table, requests, steps, engine.metrics_text)
    return summary
