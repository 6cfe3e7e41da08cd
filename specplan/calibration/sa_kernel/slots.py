"""Device slots holding per-request suffix automata, and the launches that draft from them.

:class:`SAKernelPool` is the GPU counterpart of TensorRT-LLM's ``SAResourceManager`` plus the kernel
launchers: a fixed pool of slots in device memory (layout in :mod:`.automaton`), a host build of each
prompt copied into its slot, one batched launch per step that extends every request's slot with its
accepted tokens and drafts, and the two-launch global-pool search.

Every launch reads its inputs from, and writes its outputs to, preallocated device buffers of fixed
shape (``draft`` ``[max_batch, K]``, ``match_len`` ``[max_batch]``), so :meth:`launch_extend` and
:meth:`launch_global` can be captured in a CUDA graph once the inputs are staged with
:meth:`stage`. :meth:`extend_and_draft` and :meth:`global_search` are the convenient, synchronous
forms used by the tests: they check capacity on the host, stage ragged inputs, launch and return
copies.

On a machine without a CUDA device the kernels run in the Triton interpreter on CPU tensors
(``device="cpu"``; see :data:`.primitives.INTERPRETED`).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import torch
import triton

from specplan.calibration.sa_kernel import automaton as layout
from specplan.calibration.sa_kernel import kernels, primitives
from specplan.errors import SpecplanError

GLOBAL_SUFFIX_CAP = 64  # TRT kMaxGlobalSuffixLen


class SACapacityError(SpecplanError):
    """A slot pool limit was hit; the message names the slot and the limit."""


class SAKernelPool:
    """A pool of ``num_slots`` device-resident suffix automata of up to ``max_seq_len`` tokens each.

    ``max_batch`` and ``max_draft_len`` size the static launch buffers (accepted tokens per request per
    step are at most ``max_draft_len + 1``, as in TRT).
    """

    def __init__(self, num_slots: int, max_seq_len: int, max_batch: int, max_draft_len: int,
                 device: str | torch.device = "cuda"):
        if not 1 <= num_slots <= primitives.MAX_GLOBAL_SLOTS:
            raise ValueError(f"num_slots must be in [1, {primitives.MAX_GLOBAL_SLOTS}], got {num_slots}")
        if not 1 <= max_seq_len < primitives.MAX_CONTINUATION:
            raise ValueError(f"max_seq_len must be in [1, {primitives.MAX_CONTINUATION}), got {max_seq_len}")
        if not 1 <= max_batch <= num_slots:
            raise ValueError(f"max_batch must be in [1, num_slots={num_slots}], got {max_batch}")
        if max_draft_len < 1:
            raise ValueError(f"max_draft_len must be at least 1, got {max_draft_len}")
        self.device = torch.device(device)
        if self.device.type == "cpu" and not primitives.INTERPRETED:
            raise RuntimeError(
                "SAKernelPool on the CPU needs the Triton interpreter, but TRITON_INTERPRET=0 was set when "
                "specplan.calibration.sa_kernel.kernels was imported"
            )
        self.num_slots = num_slots
        self.max_seq_len = max_seq_len
        self.max_batch = max_batch
        self.max_draft_len = max_draft_len
        self.max_nodes = layout.max_nodes_for(max_seq_len)
        self.arena_capacity = layout.arena_capacity_for(max_seq_len)

        i32 = dict(dtype=torch.int32, device=self.device)
        self.nodes = torch.zeros(num_slots, self.max_nodes, layout.NODE_FIELDS, **i32)
        self.tokens = torch.zeros(num_slots, max_seq_len, **i32)
        self.arena = torch.zeros(num_slots, self.arena_capacity, 2, **i32)
        self.header = torch.zeros(num_slots, layout.HEADER_FIELDS, **i32)

        self.batch_slots = torch.zeros(max_batch, **i32)
        self.accepted = torch.zeros(max_batch, max_draft_len + 1, **i32)
        self.accepted_lens = torch.zeros(max_batch, **i32)
        self.active_mask = torch.zeros(num_slots, **i32)
        self.draft = torch.full((max_batch, max_draft_len), -1, **i32)
        self.match_len = torch.zeros(max_batch, **i32)
        self.match_slot = torch.full((max_batch,), -1, **i32)

        # Host mirror of each slot's text length: capacity is checked before launch, without a sync.
        self._lengths: list[int | None] = [None] * num_slots

    # --- slot management ---------------------------------------------------------------------------------

    def in_use(self, slot: int) -> bool:
        """Whether ``slot`` holds a built automaton."""
        self._check_slot(slot)
        return self._lengths[slot] is not None

    def allocate(self) -> int:
        """The lowest free slot (TRT takes one from a free list on a request's first context chunk)."""
        for slot, length in enumerate(self._lengths):
            if length is None:
                return slot
        raise SACapacityError(f"all {self.num_slots} SA slots are in use; free one or raise num_slots")

    def build(self, slot: int, prompt: Sequence[int]) -> None:
        """Build ``prompt``'s automaton on the host and copy it into ``slot`` (build + H2D copy)."""
        self._check_slot(slot)
        if self._lengths[slot] is not None:
            raise SACapacityError(f"SA slot {slot} is already in use; free it before building into it")
        if len(prompt) > self.max_seq_len:
            raise SACapacityError(
                f"prompt of {len(prompt)} tokens exceeds SA slot {slot}'s capacity of {self.max_seq_len} tokens"
            )
        self.load(slot, layout.build_automaton(prompt, self.max_seq_len))

    def load(self, slot: int, flat: layout.FlatAutomaton) -> None:
        """Copy a host-built automaton into ``slot`` (only the used prefix of each array moves)."""
        self._check_slot(slot)
        if self._lengths[slot] is not None:
            raise SACapacityError(f"SA slot {slot} is already in use; free it before loading into it")
        n_tok, n_nodes, _, used = (int(x) for x in flat.header)
        if n_tok > self.max_seq_len:
            raise SACapacityError(
                f"automaton of {n_tok} tokens exceeds SA slot {slot}'s capacity of {self.max_seq_len} tokens"
            )
        self.nodes[slot, :n_nodes].copy_(torch.from_numpy(flat.nodes))
        self.tokens[slot, :n_tok].copy_(torch.from_numpy(flat.tokens))
        self.arena[slot, :used].copy_(torch.from_numpy(flat.arena))
        self.header[slot].copy_(torch.from_numpy(flat.header))
        self.active_mask[slot] = 1
        self._lengths[slot] = n_tok

    def copy_slot(self, src: int, dst: int) -> None:
        """Make ``dst`` a device-side copy of ``src`` (the benchmark fills many slots from one build)."""
        self._check_slot(dst)
        if not self.in_use(src):
            raise SACapacityError(f"SA slot {src} is not in use; nothing to copy")
        if self._lengths[dst] is not None:
            raise SACapacityError(f"SA slot {dst} is already in use; free it before copying into it")
        n_tok, n_nodes, _, used = (int(x) for x in self.header[src].tolist())
        self.nodes[dst, :n_nodes].copy_(self.nodes[src, :n_nodes])
        self.tokens[dst, :n_tok].copy_(self.tokens[src, :n_tok])
        self.arena[dst, :used].copy_(self.arena[src, :used])
        self.header[dst].copy_(self.header[src])
        self.active_mask[dst] = 1
        self._lengths[dst] = self._lengths[src]

    def reserve(self, slots: Sequence[int], n_tokens: int) -> None:
        """Account for ``n_tokens`` that launches on caller-staged inputs will append to each slot.

        :meth:`stage` does this itself; a caller that feeds :meth:`launch_extend` its own input tensors
        (a CUDA graph replaying many steps) reserves the total first, so capacity is still checked.
        """
        for slot in slots:
            if not self.in_use(slot):
                raise SACapacityError(f"SA slot {slot} is not in use; build it before drafting")
            if self._lengths[slot] + n_tokens > self.max_seq_len:
                raise SACapacityError(
                    f"SA slot {slot} would hold {self._lengths[slot] + n_tokens} tokens, "
                    f"over its capacity of {self.max_seq_len}"
                )
        for slot in slots:
            self._lengths[slot] += n_tokens

    def free(self, slot: int) -> None:
        """Release ``slot``: it leaves the global pool and can be built into again."""
        self._check_slot(slot)
        if self._lengths[slot] is None:
            raise SACapacityError(f"SA slot {slot} is not in use")
        self.header[slot].zero_()
        self.active_mask[slot] = 0
        self._lengths[slot] = None

    def snapshot(self, slot: int) -> layout.FlatAutomaton:
        """The used prefix of ``slot``'s device arrays, copied to the host (for checks and tests)."""
        self._check_slot(slot)
        header = self.header[slot].cpu().numpy().copy()
        n_tok, n_nodes, _, used = (int(x) for x in header)
        return layout.FlatAutomaton(
            nodes=self.nodes[slot, :n_nodes].cpu().numpy().copy(),
            tokens=self.tokens[slot, :n_tok].cpu().numpy().copy(),
            arena=self.arena[slot, :used].cpu().numpy().copy(),
            header=header,
        )

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise SACapacityError(f"SA slot {slot} is out of range: the pool has {self.num_slots} slots")

    # --- staging and graph-capturable launches -------------------------------------------------------------

    def stage(self, slots: Sequence[int], accepted_tokens: Sequence[Sequence[int]]) -> None:
        """Check capacity and write one step's ragged inputs into the static launch buffers."""
        if len(slots) != len(accepted_tokens):
            raise ValueError(f"got {len(slots)} slots but {len(accepted_tokens)} rows of accepted tokens")
        if not 1 <= len(slots) <= self.max_batch:
            raise ValueError(f"batch of {len(slots)} requests; must be in [1, max_batch={self.max_batch}]")
        if len(set(slots)) != len(slots):
            raise ValueError(f"a slot appears twice in one batch: {list(slots)}")
        width = self.max_draft_len + 1
        acc = np.zeros((len(slots), width), dtype=np.int32)
        lens = np.zeros(len(slots), dtype=np.int32)
        for row, (slot, toks) in enumerate(zip(slots, accepted_tokens)):
            if not self.in_use(slot):
                raise SACapacityError(f"SA slot {slot} is not in use; build it before drafting")
            if len(toks) > width:
                raise ValueError(
                    f"slot {slot}: {len(toks)} accepted tokens in one step; at most max_draft_len + 1 = {width}"
                )
            if self._lengths[slot] + len(toks) > self.max_seq_len:
                raise SACapacityError(
                    f"SA slot {slot} would hold {self._lengths[slot] + len(toks)} tokens, "
                    f"over its capacity of {self.max_seq_len}"
                )
            if any(not 0 <= t < 2**31 for t in toks):  # -1 marks an empty hash bucket
                raise ValueError(f"slot {slot}: token ids must be in [0, 2**31), got {list(toks)}")
            acc[row, :len(toks)] = toks
            lens[row] = len(toks)
        for slot, toks in zip(slots, accepted_tokens):
            self._lengths[slot] += len(toks)
        b = len(slots)
        self.batch_slots[:b].copy_(torch.from_numpy(np.asarray(slots, dtype=np.int32)))
        self.accepted[:b].copy_(torch.from_numpy(acc))
        self.accepted_lens[:b].copy_(torch.from_numpy(lens))

    def launch_extend(self, batch: int, k: int, max_ngram: int = -1, do_lookup: bool = True,
                      accepted: torch.Tensor | None = None, accepted_lens: torch.Tensor | None = None) -> None:
        """One extend(+draft) launch over the first ``batch`` staged requests; no host sync, no allocation.

        Writes ``draft[:batch, :k]`` and ``match_len[:batch]``. ``max_ngram``: -1 for the longest match, or
        n >= 1. ``accepted`` (``int32 [batch, >= max accepted]``, row-contiguous) and ``accepted_lens``
        replace the staged inputs, so a captured graph can replay many distinct steps; tokens appended
        that way must be :meth:`reserve`-d and non-negative (nothing checks them on the device).
        """
        self._check_launch(batch, k, max_ngram)
        accepted = self.accepted if accepted is None else accepted
        accepted_lens = self.accepted_lens if accepted_lens is None else accepted_lens
        kernels.sa_extend_draft_kernel[(batch,)](
            self.nodes, self.tokens, self.arena, self.header,
            self.batch_slots, accepted, accepted_lens, self.draft, self.match_len,
            self.nodes.stride(0), self.tokens.stride(0), self.arena.stride(0), accepted.stride(0),
            self.draft.stride(0), k, max_ngram,
            K_BLOCK=triton.next_power_of_2(k), DO_LOOKUP=do_lookup, num_warps=1,
        )

    def launch_global(self, batch: int, k: int, max_ngram: int = -1,
                      accepted: torch.Tensor | None = None, accepted_lens: torch.Tensor | None = None) -> None:
        """TRT's global search: an extend-only launch, then one search launch over all active slots.

        ``accepted``/``accepted_lens`` as in :meth:`launch_extend`.
        """
        self._check_launch(batch, k, max_ngram)
        self.launch_extend(batch, k, max_ngram, do_lookup=False, accepted=accepted, accepted_lens=accepted_lens)
        slot_block = triton.next_power_of_2(self.num_slots)
        kernels.sa_global_search_kernel[(batch,)](
            self.nodes, self.tokens, self.arena, self.header,
            self.batch_slots, self.active_mask, self.draft, self.match_len, self.match_slot,
            self.nodes.stride(0), self.tokens.stride(0), self.arena.stride(0), self.draft.stride(0),
            self.num_slots, k, max_ngram if max_ngram > 0 else GLOBAL_SUFFIX_CAP,
            K_BLOCK=triton.next_power_of_2(k), SLOT_BLOCK=slot_block,
            num_warps=min(max(slot_block // 32, 1), 32),
        )

    def _check_launch(self, batch: int, k: int, max_ngram: int) -> None:
        if not 1 <= batch <= self.max_batch:
            raise ValueError(f"batch must be in [1, max_batch={self.max_batch}], got {batch}")
        if not 1 <= k <= self.max_draft_len:
            raise ValueError(f"K must be in [1, max_draft_len={self.max_draft_len}], got {k}")
        if max_ngram == 0 or max_ngram < -1 or max_ngram > GLOBAL_SUFFIX_CAP:
            raise ValueError(f"max_ngram must be -1 or in [1, {GLOBAL_SUFFIX_CAP}], got {max_ngram}")

    # --- synchronous conveniences --------------------------------------------------------------------------

    def extend_and_draft(self, slots: Sequence[int], accepted_tokens: Sequence[Sequence[int]], k: int,
                         max_ngram: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """Append each request's accepted tokens to its slot, then draft.

        Returns host copies of ``draft`` ``[B, k]`` (-1 past the text's end and on rows without a match)
        and ``match_len`` ``[B]``.
        """
        self._check_launch(len(slots), k, max_ngram)  # before staging, so a bad call changes nothing
        self.stage(slots, accepted_tokens)
        b = len(slots)
        self.launch_extend(b, k, max_ngram)
        return self._draft_view(b, k), self.match_len[:b].cpu().numpy().copy()

    def global_search(self, slots: Sequence[int], accepted_tokens: Sequence[Sequence[int]], k: int,
                      max_ngram: int = -1, active_slots: Iterable[int] | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Append accepted tokens, then search every active slot for each request's suffix.

        ``active_slots`` (default: every slot in use) is the global pool searched; completed requests
        that the caller keeps for cross-request search simply stay built. Returns host copies of
        ``draft`` ``[B, k]``, ``match_len`` ``[B]`` and ``match_slot`` ``[B]`` (-1 without a match).
        """
        self._check_launch(len(slots), k, max_ngram)  # before staging, so a bad call changes nothing
        if active_slots is not None:
            mask = np.zeros(self.num_slots, dtype=np.int32)
            for slot in active_slots:
                if not self.in_use(slot):
                    raise SACapacityError(f"SA slot {slot} is not in use and cannot be searched")
                mask[slot] = 1
            missing = [s for s in slots if not mask[s]]
            if missing:
                raise ValueError(f"requests' own slots {missing} must be in active_slots")
            self.active_mask.copy_(torch.from_numpy(mask))
        else:
            self.active_mask.copy_(torch.tensor([int(x is not None) for x in self._lengths], dtype=torch.int32))
        self.stage(slots, accepted_tokens)
        b = len(slots)
        self.launch_global(b, k, max_ngram)
        return (self._draft_view(b, k), self.match_len[:b].cpu().numpy().copy(),
                self.match_slot[:b].cpu().numpy().copy())

    def _draft_view(self, b: int, k: int) -> np.ndarray:
        return self.draft[:b, :k].cpu().numpy().copy()
