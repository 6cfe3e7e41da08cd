"""The K each batch size gets, as bands an operator can read ("batch 1-7: K 0 (off); 8-15: 4; 16+: 0").

The bands come from the engine's own lookups in :mod:`specplan.simulator.control`, on the path the
config runs (:mod:`specplan.simulator.paths`), evaluated at every batch size 1..max:

- TensorRT-LLM drafter path (NGram, prompt lookup): ``Drafter.get_draft_len_for_batch_size`` on the
  active requests, keys are lower bounds (``bisect_right``, K = 0 below the smallest key); a
  ``max_concurrency`` switches speculation off where ``should_use_spec_decode`` says so;
- TensorRT-LLM one-model path (SA, MTP, Eagle3): ``update_draft_len`` on the scheduled batch, keys are
  upper bounds (``bisect_left``, K = 0 above the largest key);
- vLLM: the dense ``num_speculative_tokens_per_batch_size`` table (one band list per context bucket);
- no schedule: ``max_draft_len`` at every size.

TensorRT-LLM's ``draft_len_schedule`` docstring (``llmapi/llm_args.py``) describes upper bounds while
the NGram drafter's code reads lower bounds; :func:`schedule_reading_warning` says so when a schedule
means different things under the two readings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from specplan.config import SimConfig
from specplan.simulator import control
from specplan.simulator.paths import TRT_DRAFTER, VLLM, path_for


@dataclass(frozen=True)
class KBand:
    """Batch sizes ``lo..hi`` (inclusive) that all get draft length ``k``."""

    lo: int
    hi: int
    k: int


def bands_of(lookup: Callable[[int], int], max_batch: int) -> list[KBand]:
    """``lookup`` evaluated at every batch size 1..``max_batch``, runs of equal K merged."""
    bands: list[KBand] = []
    for size in range(1, max_batch + 1):
        k = int(lookup(size))
        if bands and bands[-1].k == k:
            bands[-1] = KBand(bands[-1].lo, size, k)
        else:
            bands.append(KBand(size, size, k))
    return bands


def format_bands(bands: Sequence[KBand]) -> str:
    """``batch 1-7: K 0 (off); 8-15: 4; 16+: 0 (off)``: the last band runs to the largest batch."""
    parts = []
    for i, b in enumerate(bands):
        span = f"{b.lo}+" if i == len(bands) - 1 else (str(b.lo) if b.lo == b.hi else f"{b.lo}-{b.hi}")
        parts.append(f"{span}: {'K ' if i == 0 else ''}{b.k}{' (off)' if b.k == 0 else ''}")
    return "batch " + "; ".join(parts)


def trtllm_lookup(schedule: Optional[Mapping[int, int]], max_draft_len: int, reading: str) -> Callable[[int], int]:
    """K per batch size from a TensorRT-LLM schedule read with ``reading`` keys (``lower_bound`` or
    ``upper_bound``); ``max_draft_len`` everywhere without one."""
    if not schedule:
        return lambda size: max_draft_len
    sched = dict(schedule)
    return lambda size: control.draft_len_for_batch_size(sched, size, reading)


def path_bands(cfg: SimConfig) -> list[list[KBand]]:
    """The bands of a config as its engine runs it: one list, or one per vLLM context bucket.

    ``cfg`` must be resolved (``specplan.simulator.run.resolve``) so presets and AUTO are applied."""
    e, sp = cfg.engine, cfg.speculation
    max_batch = max(e.max_batch_size, e.max_num_active_requests or 0)
    if sp.decoding_type == "none":
        return [bands_of(lambda size: 0, max_batch)]
    rules = path_for(e.engine, sp.decoding_type)
    if rules.name == VLLM:
        if not sp.num_speculative_tokens_per_batch_size:
            return [bands_of(lambda size: sp.max_draft_len, max_batch)]
        table, _ = control.vllm_dynamic_sd_lookup(sp.num_speculative_tokens_per_batch_size, max_batch,
                                                  sp.max_draft_len)
        return [bands_of(lambda size, c=c: table[size, c], max_batch) for c in range(table.shape[1])]
    lookup = trtllm_lookup(sp.draft_len_schedule, sp.max_draft_len, sp.schedule_lookup or rules.schedule_lookup)
    if rules.name == TRT_DRAFTER and sp.max_concurrency is not None:
        # should_use_spec_decode: off when the batch it sees exceeds max_concurrency
        def gated(size: int) -> int:
            k = lookup(size)
            on = control.should_use_spec_decode(size, e.max_batch_size, e.max_num_tokens, k, sp.max_concurrency)
            return k if on else 0
        return [bands_of(gated, max_batch)]
    return [bands_of(lookup, max_batch)]


def describe_bands(cfg: SimConfig) -> str:
    """:func:`path_bands` as one line (vLLM context buckets separated by `` | ``)."""
    lists = path_bands(cfg)
    if len(lists) == 1:
        return format_bands(lists[0])
    return " | ".join(f"context bucket {i + 1}: {format_bands(b)}" for i, b in enumerate(lists))


def k_shares(counts: Mapping[int, int]) -> dict[int, float]:
    """Share of the steps run at each K, in order of K, from the steps counted at each
    (``iteration_sums.iteration_figures``: a step that did not speculate counts as K 0)."""
    total = sum(counts.values())
    return {k: c / total for k, c in sorted(counts.items())}


def format_shares(shares: Mapping[int, float]) -> str:
    """``K 0: 12%, K 4: 88%`` (share of steps; keys may be JSON's strings)."""
    return ", ".join(f"K {k}: {share:.0%}" for k, share in sorted((int(k), v) for k, v in shares.items()))


def schedule_reading_warning(cfg: SimConfig) -> Optional[str]:
    """One line when a TensorRT-LLM schedule on a lower-bound path (the NGram drafter) reads as the
    documented upper bounds would have it written, and the two readings give different K.

    The telltale is a smallest key above 1: TensorRT-LLM requires the smallest key to map to
    ``max_draft_len``, which the docstring's reading applies to every batch up to that key, while
    the drafter's code gives those batches K = 0. The line names both readings' bands and the
    schedule that, written in the code's keys, gives the documented bands.
    """
    e, sp = cfg.engine, cfg.speculation
    if e.engine != "trtllm" or sp.decoding_type == "none" or not sp.draft_len_schedule:
        return None
    rules = path_for("trtllm", sp.decoding_type)
    if (sp.schedule_lookup or rules.schedule_lookup) != "lower_bound" or min(sp.draft_len_schedule) <= 1:
        return None
    from specplan.simulator.presets import convert_schedule

    code = bands_of(trtllm_lookup(sp.draft_len_schedule, sp.max_draft_len, "lower_bound"), e.max_batch_size)
    docs = bands_of(trtllm_lookup(sp.draft_len_schedule, sp.max_draft_len, "upper_bound"), e.max_batch_size)
    if code == docs:
        return None
    meant = convert_schedule(sp.draft_len_schedule, "upper_bound", "lower_bound", e.max_batch_size)
    return (f"speculation.draft_len_schedule {dict(sp.draft_len_schedule)} on TensorRT-LLM's {sp.decoding_type} "
            f"drafter: its code reads keys as lower bounds (Drafter.get_draft_len_for_batch_size: "
            f"{format_bands(code)}), its llm_args.py docstring as upper bounds ({format_bands(docs)}); "
            f"simulated as the code runs it; for the documented bands write {meant}")
