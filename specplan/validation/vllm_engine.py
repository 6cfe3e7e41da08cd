"""Run requests through vLLM's offline ``LLM`` API with greedy sampling, recording every engine step.

The recorder is a small hook on the engine core's scheduler (vLLM V1, ``vllm/v1/core/sched/
scheduler.py``, 0.32): ``EngineCore.step`` calls ``Scheduler.schedule()``, runs the model (the
n-gram drafter proposes inside the model runner after sampling) and passes both outputs to
``Scheduler.update_from_output(scheduler_output, model_runner_output)``. Wrapping those two
methods of the live scheduler instance gives, per step and in the scheduler's own row order:

- scheduled requests and tokens: ``SchedulerOutput.num_scheduled_tokens`` (request id -> tokens);
- drafts: ``SchedulerOutput.scheduled_spec_decode_tokens`` (the draft tokens being verified);
- accepted: ``len(sampled_token_ids[row]) - 1`` for a row that verified a draft, read twice: before
  ``update_from_output``, the count vLLM's own ``SpecDecodingStats`` (and so its Prometheus metrics)
  take (``accepted_stats``), and after it, once the stop check has cut a finishing request's tokens
  in place at ``max_tokens`` / EOS: the accepted tokens kept (``accepted``, what the simulation,
  capped at the recorded output, is compared with);
- committed: the ``new_token_ids`` of the step's ``EngineCoreOutputs`` (after stop checks);
- wall time: from ``schedule()`` entry to ``update_from_output()`` return; of it, the scheduler's
  own host time (``schedule()`` plus ``update_from_output()``, the per-step host term of a step-time fit).

vLLM's metrics (``SpecDecodingStats``) are per step totals without the request split, hence the hook.
The hook needs the scheduler in this process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (``vllm_env``).
"""

from __future__ import annotations

import gc
import sys
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from specplan.errors import SpecplanError


@dataclass
class StepRow:
    """One request scheduled in one engine step."""

    step: int
    request: str
    scheduled: int  # tokens scheduled for it (prefill chunk, or 1 + verified drafts)
    drafted: int  # draft tokens verified this step
    accepted: int  # of those, accepted and kept (after the stop check cut the output at max_tokens/EOS)
    committed: int  # tokens appended to its output this step
    accepted_stats: int = 0  # accepted as vLLM's SpecDecodingStats count it: before the stop check


@dataclass
class EngineRun:
    """What one vLLM run produced: per-step rows, per-step wall seconds, and each request's output."""

    rows: list[StepRow] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    host_s: list[float] = field(default_factory=list)  # of step_s, in schedule() and update_from_output()
    outputs: dict[str, list[int]] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    metrics_text: Optional[str] = None  # the engine's Prometheus metrics after the run, as /metrics serves them


class StepRecorder:
    """Wraps ``schedule``/``update_from_output`` of one scheduler instance (see the module docstring)."""

    def __init__(self, scheduler) -> None:
        self.rows: list[StepRow] = []
        self.step_s: list[float] = []
        self.host_s: list[float] = []
        self._t0 = self._scheduled = 0.0
        schedule, update = scheduler.schedule, scheduler.update_from_output

        def timed_schedule(*args, **kwargs):
            self._t0 = time.perf_counter()
            out = schedule(*args, **kwargs)
            self._scheduled = time.perf_counter()
            return out

        def recorded_update(scheduler_output, model_runner_output):
            # The stop check truncates sampled_token_ids in place: their lengths now are what the stats count.
            before = self._sampled_lengths(scheduler_output, model_runner_output)
            t_update = time.perf_counter()
            result = update(scheduler_output, model_runner_output)
            t_end = time.perf_counter()
            if scheduler_output.total_num_scheduled_tokens > 0:
                self._record(scheduler_output, model_runner_output, result, before)
                self.step_s.append(time.perf_counter() - self._t0)
                self.host_s.append((self._scheduled - self._t0) + (t_end - t_update))
            return result

        scheduler.schedule = timed_schedule
        scheduler.update_from_output = recorded_update

    @staticmethod
    def _sampled_lengths(sched_out, runner_out) -> dict[str, int]:
        sampled = runner_out.sampled_token_ids
        out = {}
        for rid in sched_out.scheduled_spec_decode_tokens:
            idx = runner_out.req_id_to_index.get(rid)
            out[rid] = len(sampled[idx]) if sampled and idx is not None else 0
        return out

    def _record(self, sched_out, runner_out, engine_outputs, sampled_before: dict[str, int]) -> None:
        step = len(self.step_s) + 1
        committed: dict[str, int] = {}
        for outs in engine_outputs.values():
            for o in outs.outputs:
                committed[o.request_id] = committed.get(o.request_id, 0) + len(o.new_token_ids)
        sampled = runner_out.sampled_token_ids
        for rid, n in sched_out.num_scheduled_tokens.items():
            drafts = sched_out.scheduled_spec_decode_tokens.get(rid) or []
            idx = runner_out.req_id_to_index.get(rid)
            generated = sampled[idx] if sampled and idx is not None else []
            accepted = max(len(generated) - 1, 0) if drafts else 0
            stats = max(sampled_before.get(rid, 0) - 1, 0) if drafts else 0
            self.rows.append(StepRow(step, rid, int(n), len(drafts), accepted, committed.get(rid, 0), stats))


def _scheduler(llm):
    """The live scheduler of an in-process engine core."""
    core = getattr(llm.llm_engine, "engine_core", None)
    core = getattr(core, "engine_core", None)
    scheduler = getattr(core, "scheduler", None)
    if scheduler is None:
        raise SpecplanError("vLLM runs its engine core in another process; set VLLM_ENABLE_V1_MULTIPROCESSING=0")
    return scheduler


def _guard_kernel_overrides() -> None:
    """Keep llvmlite out of vLLM's CPU kernel-override scan.

    ``CpuPlatform.register_triton_kernel_overrides`` (vLLM 0.32, ``triton_utils/dispatcher.py``
    ``_rebind_kernels``) walks every module's namespace and reads ``vars(value)`` of each object;
    llvmlite's ``ffi.lib`` answers any attribute through ``__getattr__`` and breaks that scan. In a
    multi-process engine the worker has not imported numba yet; in this process vLLM's own n-gram
    proposer has. llvmlite holds no kernels, so it is hidden from ``sys.modules`` for the scan only.
    """
    from vllm.platforms.cpu import CpuPlatform

    original = CpuPlatform.register_triton_kernel_overrides
    if getattr(original, "_specplan_guard", False):
        return

    def guarded():
        hidden = {n: sys.modules.pop(n) for n in list(sys.modules) if n == "llvmlite" or n.startswith("llvmlite.")}
        try:
            return original()
        finally:
            sys.modules.update(hidden)

    guarded._specplan_guard = True
    CpuPlatform.register_triton_kernel_overrides = staticmethod(guarded)


def _shutdown(llm) -> None:
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    cleanup_dist_env_and_memory()


def _prometheus_text() -> Optional[str]:
    """The process's Prometheus registry in the text exposition format (what ``vllm serve``'s
    ``/metrics`` serves), or None when vLLM registered no metrics here."""
    try:
        from prometheus_client import REGISTRY, generate_latest
    except ImportError:
        return None
    text = generate_latest(REGISTRY).decode()
    return text if "vllm:" in text else None


def run_engine(model: str, prompts: Sequence[Sequence[int]], ids: Sequence[str], *, max_tokens: int,
               speculative_config: Optional[dict], max_num_seqs: int, max_num_batched_tokens: int,
               max_model_len: Optional[int], device: str, seed: int = 0, record: bool = True,
               enable_prefix_caching: bool = False) -> EngineRun:
    """Generate greedily for every prompt (all submitted at once, in order) and record each step.

    Prefix caching as asked (the simulation then runs vLLM's rule with the engine's block size);
    chunked prefill stays on, as vLLM V1 always schedules.
    """
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    # Stats on for the recorded run only: its Prometheus counters (spec_decode_*) are then this run's alone.
    kwargs = dict(model=model, seed=seed, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                  enable_prefix_caching=enable_prefix_caching, enable_chunked_prefill=True, speculative_config=speculative_config,
                  disable_log_stats=not record)
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if device == "cpu":
        # Eager: torch.compile's warm-up dominates a short CPU run and changes no schedule.
        kwargs.update(dtype="float32", enforce_eager=True)
        _guard_kernel_overrides()
    llm = LLM(**kwargs)
    try:
        cfg = llm.llm_engine.vllm_config
        settings = {"max_num_seqs": cfg.scheduler_config.max_num_seqs,
                    "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
                    "max_model_len": cfg.model_config.max_model_len,
                    "block_size": cfg.cache_config.block_size, "enable_prefix_caching": enable_prefix_caching,
                    "async_scheduling": bool(cfg.scheduler_config.async_scheduling),
                    "speculative_config": speculative_config}
        recorder = StepRecorder(_scheduler(llm)) if record else None
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        outs = llm.generate([TokensPrompt(prompt_token_ids=list(map(int, p))) for p in prompts], params,
                            use_tqdm=False)
        run = EngineRun(settings=settings)
        for rid, o in zip(ids, outs):
            run.outputs[rid] = list(o.outputs[0].token_ids)
        if recorder is not None:
            # llm.generate numbers requests in submission order ("0-<suffix>", "1-<suffix>", ...).
            for row in recorder.rows:
                row.request = ids[int(row.request.split("-", 1)[0])]
            run.rows, run.step_s, run.host_s = recorder.rows, recorder.step_s, recorder.host_s
            run.metrics_text = _prometheus_text()
        return run
    finally:
        _shutdown(llm)
