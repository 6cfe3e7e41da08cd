"""Replay a simulated schedule on a device: mixed batches over a per-request KV cache (torch).

``specplan validate`` runs each simulated iteration for real on the ``DecoderStack`` (the model's
real shapes, random weights) and times it the way calibration times a grid point:

- **KV cache.** Each live request holds a slot of ``slot_len`` tokens in every layer's cache (the
  stack's flat buffers), from its first scheduled step to its last. A step writes K/V at every
  position it computes (``context .. context + query - 1``) and attends over ``context + query``;
  the next step's context (resident + committed, from the trace) decides what is kept, so rejected
  draft positions are simply overwritten: the cache grows and rewinds as the trace says.
- **Attention.** On CUDA, one FlashAttention-2 varlen call per layer for all rows, prefill chunks
  and verify rows alike (each row reads its slot from its offset, ``context + query`` keys long, as
  paged engines' kernels read their pages), checked against SDPA and CUDA-graph capture before use;
  elsewhere, or when that check fails, one SDPA call per row over its slot (the reason is recorded).
- **Padding.** With CUDA-graph padding on, the step's token count is padded as the cost model pads
  it (``terms.padded_tokens``); padded tokens run the GEMMs and norms but no attention and no logits,
  as in vLLM.
- **Drafting.** The drafting rows' drafter runs before the forward and is timed on its own: on CUDA,
  SA drafts with the GPU kernel (``sa_kernel.SAKernelPool``: a slot per request built from its prompt
  on first use, untimed, then one extend+draft launch per step, replayed from a CUDA graph captured
  per (rows, K) and timed with CUDA events); every other case calls the simulator's own drafter
  (``propose``) on the host, timed by thread CPU time on a CPU and by wall clock on a GPU host.
  Acceptance is not decided here: the query lengths and the next contexts come from the trace.
- **Timing.** The forward of each step is timed by ``timing.time_cuda`` (CUDA graph captured for
  that step, events over a block of replays; eager launches too) or ``timing.time_cpu`` (fastest of
  several calls by thread CPU time, the convention CPU profiles are fitted to). Replaying a step
  rewrites the same K/V at the same positions, so repeats are idempotent. Before the timed pass the
  first ``warmup`` steps run once untimed (allocator, library handles, kernel selection).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from specplan.calibration.attention import (CHECK_SLOT_TOKENS, RowAttention, VarlenAttention, positions,
                                            rope_cache, varlen_attention_check)
from specplan.calibration.runner import BLOCK_S
from specplan.calibration.stack import DecoderStack, rotary
from specplan.calibration.timing import time_cpu, time_cuda
from specplan.cost_models.terms import padded_tokens
from specplan.errors import SpecplanError
from specplan.validation.schedule import Step

CPU_PASSES = 3  # calibrate's default --repeats: a CPU grid point is the fastest call of three passes


# ----------------------------------------------------------------------------- slots
@dataclass(frozen=True)
class SlotPlan:
    """Which KV slot each row of each step uses, and the slot size (the longest context + query)."""

    slots: list[np.ndarray]
    num_slots: int
    slot_len: int

    @property
    def kv_tokens(self) -> int:
        return self.num_slots * self.slot_len


def plan_slots(steps: Sequence[Step]) -> SlotPlan:
    """Give each request the lowest free slot at its first step and free it after its last one."""
    last: dict[int, int] = {}
    longest = 1
    for i, step in enumerate(steps):
        for rid in step.requests.tolist():
            last[rid] = i
        longest = max(longest, int((step.context + step.query).max()))
    free: list[int] = []
    held: dict[int, int] = {}
    num_slots = 0
    out = []
    for i, step in enumerate(steps):
        slots = np.empty(len(step.requests), dtype=np.int64)
        for j, rid in enumerate(step.requests.tolist()):
            if rid not in held:
                if free:
                    held[rid] = free.pop(free.index(min(free)))
                else:
                    held[rid] = num_slots
                    num_slots += 1
            slots[j] = held[rid]
        out.append(slots)
        for rid in step.requests.tolist():
            if last[rid] == i:
                free.append(held.pop(rid))
    return SlotPlan(out, num_slots, longest)


# ----------------------------------------------------------------------------- one step
class MixedStep:
    """One iteration's forward over mixed rows (prefill chunks and verify rows) on static inputs.

    Calling it runs embedding, every layer (``DecoderStack.layer``) with the row-aware attention,
    the final norm, LM head and argmax on the positions that need logits.
    """

    def __init__(self, stack: DecoderStack, attention, step: Step, slots: np.ndarray,
                 tokens: Sequence[np.ndarray], rope: tuple[torch.Tensor, torch.Tensor], pad_to: Optional[int]) -> None:
        self.stack, self.attention = stack, attention
        q, ctx = step.query, step.context
        n = int(q.sum())
        self.tokens, self.padded = n, (padded_tokens(n, pad_to) if pad_to else n)
        pos = positions(q, ctx)
        ids = np.zeros(self.padded, dtype=np.int64)
        ids[:n] = np.concatenate([np.take(tokens[r], p, mode="wrap") for r, p in
                                  zip(step.requests.tolist(), np.split(pos, np.cumsum(q)[:-1]))]) % stack.vocab
        dev = stack.device
        self.ids = torch.from_numpy(ids).to(dev)
        index = torch.from_numpy(pos).to(dev)
        self.cos, self.sin = rope[0][index], rope[1][index]
        self.meta = attention.plan(slots, q, ctx)
        # Logits for every position of a generation row and the last of a prefill row.
        ends = np.cumsum(q)
        need = np.concatenate([[e - 1] if pre else np.arange(e - rq, e) for e, rq, pre in zip(ends, q, step.prefill)])
        self.logit_index = None if len(need) == self.padded else torch.from_numpy(need.astype(np.int64)).to(dev)

    def _attend(self, i, qs, ks, vs):
        n, s = self.tokens, self.stack
        q = rotary(qs[:n].view(n, s.qh, s.hd), self.cos, self.sin)
        k = rotary(ks[:n].view(n, s.kvh, s.hd), self.cos, self.sin)
        out = self.attention(i, q, k, vs[:n].view(n, s.kvh, s.hd), self.meta)
        return out if n == self.padded else F.pad(out, (0, 0, 0, self.padded - n))

    def hidden(self) -> torch.Tensor:
        """Hidden states of the positions whose logits the step computes."""
        x = F.embedding(self.ids, self.stack.embed)
        for i in range(len(self.stack.layers)):
            x = self.stack.layer(i, x, self._attend)
        return x if self.logit_index is None else x.index_select(0, self.logit_index)

    def __call__(self) -> torch.Tensor:
        return self.stack.logits(self.hidden())


# ----------------------------------------------------------------------------- drafting
class HostDrafter:
    """The simulator's own drafter on the host: one ``propose`` per drafting row, timed by ``clock``."""

    def __init__(self, oracle, clock: Callable[[], float], what: str) -> None:
        self.oracle, self.clock, self.what = oracle, clock, what

    def __call__(self, step: Step, slots: np.ndarray) -> float:
        rows = np.flatnonzero(step.drafting)
        rids, committed = step.requests[rows].tolist(), step.committed[rows].tolist()
        start = self.clock()
        for rid, c in zip(rids, committed):
            self.oracle.propose(rid, c, step.k)
        return self.clock() - start


class SAKernelDrafter:
    """TensorRT-LLM's SA drafting on the GPU kernel (see the module docstring).

    A request's automaton is built from its prompt the first time it drafts; each step appends the
    tokens the request committed since its last draft (more than K + 1 only after steps without
    speculation; the backlog goes in untimed launches first), then one timed extend+draft launch.
    """

    what = "SA GPU kernel (sa_kernel.SAKernelPool), CUDA graph per (rows, K), CUDA events"

    def __init__(self, requests, num_slots: int, max_batch: int, max_k: int, max_ngram: int, device: str) -> None:
        from specplan.calibration.sa_kernel.slots import SAKernelPool

        self.tokens = [np.asarray(r.tokens, dtype=np.int64) for r in requests]
        self.prompt_lens = [r.prompt_len for r in requests]
        longest = max(len(t) for t in self.tokens) + max_k + 2
        # One slot more than the KV plan holds: a scratch automaton for compile launches.
        self.pool = SAKernelPool(num_slots + 1, longest, min(max_batch, num_slots + 1), max_k, device)
        self.scratch = num_slots
        self.pool.build(self.scratch, [1, 2])
        self.max_k, self.max_ngram = max_k, max_ngram
        self.held: dict[int, tuple[int, int]] = {}  # request -> (SA slot, output tokens in its automaton)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.compiled: set[int] = set()

    def _compile(self, k: int) -> None:
        """Launch once on the scratch slot (nothing appended), so capture never compiles."""
        if k not in self.compiled:
            self.pool.stage([self.scratch], [[]])
            self.pool.launch_extend(1, k, self.max_ngram)
            self.compiled.add(k)

    def _slot(self, rid: int, kv_slot: int) -> int:
        slot, _ = self.held.get(rid, (None, 0))
        if slot != kv_slot:
            if self.pool.in_use(kv_slot):  # the KV slot was another request's: its automaton goes with it
                self.pool.free(kv_slot)
            self.pool.build(kv_slot, self.tokens[rid][:self.prompt_lens[rid]].tolist())
            self.held = {r: v for r, v in self.held.items() if v[0] != kv_slot}
            self.held[rid] = (kv_slot, 0)
        return kv_slot

    def __call__(self, step: Step, slots: np.ndarray) -> float:
        rows = np.flatnonzero(step.drafting)
        if not len(rows):
            return 0.0
        k = step.k
        self._compile(k)
        sa_slots, accepted = [], []
        for row in rows.tolist():
            rid, c = int(step.requests[row]), int(step.committed[row])
            slot = self._slot(rid, int(slots[row]))
            have = self.held[rid][1]
            new = self.tokens[rid][self.prompt_lens[rid] + have:self.prompt_lens[rid] + c].tolist()
            while len(new) > k + 1:  # catch up after steps without drafting (untimed)
                self.pool.stage([slot], [new[:k + 1]])
                self.pool.launch_extend(1, k, self.max_ngram)
                new = new[k + 1:]
            self.held[rid] = (slot, c)
            sa_slots.append(slot)
            accepted.append(new)
        self.pool.stage(sa_slots, accepted)
        return self._timed_launch(len(rows), k)

    def _timed_launch(self, batch: int, k: int) -> float:
        """GPU seconds of one extend+draft launch over the staged rows (graph replay between CUDA events)."""
        key = (batch, k)
        if key not in self.graphs:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.pool.launch_extend(batch, k, self.max_ngram)
            self.graphs[key] = graph
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.graphs[key].replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3


# ----------------------------------------------------------------------------- the replay
@dataclass(frozen=True)
class ReplaySettings:
    """How to replay: device, weights dtype, CPU threads, seed, warm-up steps, CUDA-graph padding
    (``pad_to``: the largest captured token count, None for no padding), attention (``auto``: the
    varlen kernel on CUDA when it passes its check, else per row; ``rows`` forces per-row SDPA)."""

    device: str = "cpu"
    dtype: str = "fp32"
    threads: int = 1
    seed: int = 0
    warmup: int = 3
    pad_to: Optional[int] = None
    attention: str = "auto"


_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def replay_info(settings: ReplaySettings) -> dict:
    """What the replay runs on (device, versions, timing convention)."""
    cuda = settings.device == "cuda"
    if cuda:
        from specplan.calibration.runner import gpu_state

        name = torch.cuda.get_device_name(0)
    else:
        from specplan.calibration.draft_bench import host_description

        name = host_description()
    return {"device": settings.device, "device_name": name, "torch": str(torch.__version__),
            "cuda": torch.version.cuda, "dtype": settings.dtype, "threads": torch.get_num_threads(),
            "gpu_state": gpu_state() if cuda else None,
            "timing": ("CUDA graph captured per step, CUDA events over a block of replays (mean); eager launches "
                       "timed the same way" if cuda else
                       f"thread CPU time, fastest call of {CPU_PASSES} blocks of at least 5 calls per step "
                       "(the CPU profile's convention)"),
            "warmup_steps": settings.warmup,
            "padding": f"token count padded to CUDA-graph sizes up to {settings.pad_to}" if settings.pad_to else "none"}


def check_settings(settings: ReplaySettings) -> None:
    """One-line errors for a replay this machine cannot run (before anything is simulated)."""
    if settings.dtype not in _DTYPES:
        raise SpecplanError(f"validate: profile dtype {settings.dtype} is not replayed (fp32, bf16)")
    if settings.device == "cuda" and not torch.cuda.is_available():
        raise SpecplanError("--device cuda: no CUDA device here; use --device cpu (with a CPU profile)")


def build_stack(model, settings: ReplaySettings, kv_tokens: int) -> DecoderStack:
    """The decoder stack for a replay, after checking that ``kv_tokens`` of cache fit on the device."""
    from specplan.cost_models.capacity import kv_bytes_per_token, weight_bytes

    check_settings(settings)
    if settings.device == "cuda":
        size = _DTYPES[settings.dtype].itemsize
        need = weight_bytes(model, 1, size) + kv_tokens * kv_bytes_per_token(model, 1, size)
        free, _ = torch.cuda.mem_get_info()
        if need > 0.85 * free:
            raise SpecplanError(f"validate: {model.name} weights plus {kv_tokens} KV tokens need {need / 1e9:.1f} GB, "
                                f"more than this GPU has free ({free / 1e9:.1f} GB); use a smaller scenario")
    else:
        torch.set_num_threads(settings.threads)
    return DecoderStack(model, 1, settings.device, _DTYPES[settings.dtype], max(kv_tokens, 3 * CHECK_SLOT_TOKENS),
                        settings.seed)


def make_attention(stack: DecoderStack, plan: SlotPlan, mode: str) -> tuple[object, Optional[str]]:
    """The attention for ``plan``'s slots, and why the varlen kernel is not used (None when it is)."""
    why = "per-row attention asked for" if mode == "rows" else varlen_attention_check(stack)
    if why is None:
        return VarlenAttention(stack, plan.num_slots, plan.slot_len), None
    return RowAttention(stack, plan.num_slots, plan.slot_len), why


def replay_steps(stack: DecoderStack, steps: Sequence[Step], plan: SlotPlan, attention, tokens: Sequence[np.ndarray],
                 drafter: Optional[Callable[[Step, np.ndarray], float]], settings: ReplaySettings,
                 progress: Optional[Callable[[int], None]] = None) -> pd.DataFrame:
    """Replay every step (see the module docstring); one row per step with the measured seconds.

    Columns: ``iteration``, ``tokens``, ``padded_tokens``, ``meas_forward_s`` (graph on CUDA, thread
    CPU time on a CPU), ``meas_forward_alt_s`` (eager on CUDA, wall clock on a CPU), ``replays``,
    ``meas_draft_s``.
    """
    cuda = settings.device == "cuda"
    rope = rope_cache(stack, plan.slot_len)
    rows = []
    with torch.inference_mode():
        for step, slots in list(zip(steps, plan.slots))[:settings.warmup]:
            MixedStep(stack, attention, step, slots, tokens, rope, settings.pad_to)()
        if cuda:
            torch.cuda.synchronize()
        for n, (step, slots) in enumerate(zip(steps, plan.slots)):
            draft_s = drafter(step, slots) if drafter is not None and step.drafting.any() else 0.0
            fn = MixedStep(stack, attention, step, slots, tokens, rope, settings.pad_to)
            if cuda:
                timed = time_cuda(fn, BLOCK_S["cuda"])
                (main, r), (alt, _) = timed["graph"], timed["eager"]
            else:
                # As calibration: the fastest call of ``CPU_PASSES`` blocks (a grid point's passes).
                blocks = [time_cpu(fn, BLOCK_S["cpu"]) for _ in range(CPU_PASSES)]
                main, alt = min(b["cpu"][0] for b in blocks), min(b["wall"][0] for b in blocks)
                r = sum(b["cpu"][1] for b in blocks)
            rows.append({"iteration": step.iteration, "tokens": fn.tokens, "padded_tokens": fn.padded,
                         "meas_forward_s": main, "meas_forward_alt_s": alt, "replays": r, "meas_draft_s": draft_s})
            if progress is not None:
                progress(n + 1)
    return pd.DataFrame(rows)


def host_clock(device: str) -> Callable[[], float]:
    """Thread CPU time on a (shared) CPU, as calibration times CPU steps; wall clock on a GPU's host."""
    return time.perf_counter if device == "cuda" else time.thread_time


def sa_max_ngram(ngram_size: int) -> int:
    """The kernel's ``max_ngram`` for an SA ``max_matching_ngram_size`` (-1 or n <= 0: longest match)."""
    return -1 if ngram_size <= 0 else int(min(ngram_size, 64))

