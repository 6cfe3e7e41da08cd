"""The one request model every loader produces and the simulator consumes."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _as_tokens(values) -> np.ndarray:
    arr = np.asarray(values, dtype=np.int32)
    if arr.ndim != 1:
        raise ValueError("token ids must be a flat list of integers")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class Request:
    """One request: the prompt the engine sees and the tokens the target model produced.

    ``prompt_ids`` is the full prompt after the chat template (for turn n of a session it holds all
    earlier turns and answers). ``output_ids`` is the realised response, EOS included where the
    model emitted one. ``arrival_s`` is optional: traces with timestamps carry it, otherwise the
    arrival process assigns times. ``max_new_tokens`` is the generation limit the request ran with,
    when the trace states it (see ``specplan.acceptance.drafters.limits``).
    """

    id: str
    prompt_ids: np.ndarray
    output_ids: np.ndarray
    category: str | None = None
    session: str | None = None
    turn: int = 0
    arrival_s: float | None = None
    max_new_tokens: int | None = None
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_ids", _as_tokens(self.prompt_ids))
        object.__setattr__(self, "output_ids", _as_tokens(self.output_ids))

    def replaced(self, **changes) -> "Request":
        """A copy with ``changes`` to fields other than the token arrays, which it shares (they are
        read-only and already validated): ``dataclasses.replace`` without re-running
        ``__post_init__``, which a workload of many requests would pay once per copy."""
        if "prompt_ids" in changes or "output_ids" in changes:
            raise ValueError("Request.replaced: token arrays are shared; build a new Request to change them")
        new = object.__new__(Request)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    @property
    def prompt_len(self) -> int:
        return int(self.prompt_ids.shape[0])

    @property
    def output_len(self) -> int:
        return int(self.output_ids.shape[0])

    @property
    def tokens(self) -> np.ndarray:
        """Prompt followed by output: the whole history a drafter can ever see for this request."""
        return np.concatenate([self.prompt_ids, self.output_ids])

    def same_as(self, other: "Request") -> bool:
        """Field-by-field equality, token arrays compared by value."""
        return (
            self.id == other.id
            and self.category == other.category
            and self.session == other.session
            and self.turn == other.turn
            and self.arrival_s == other.arrival_s
            and self.max_new_tokens == other.max_new_tokens
            and np.array_equal(self.prompt_ids, other.prompt_ids)
            and np.array_equal(self.output_ids, other.output_ids)
        )
