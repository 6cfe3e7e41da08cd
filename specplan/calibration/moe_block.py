"""A mixture-of-experts MLP with random weights of a config's shapes, for the calibration stack (torch).

One MoE layer, as the engines run it (vLLM's ``fused_moe``, TensorRT-LLM's MoE plugin): the router GEMM
and its top-k; the routed tokens permuted so each expert's rows are contiguous; per touched expert one
gate/up GEMM and one down GEMM over its rows (the grouped GEMM, as a loop of GEMMs into one buffer);
SiLU*mul once over all rows; the outputs scaled by the routing weights and summed back per token; the
shared experts as one dense gated MLP over every token. Weights are one GPU's shard under tensor
parallelism (each expert's width divided by TP, as ``layer_costs`` prices it with EP 1).

Which experts the tokens go to is fixed when a step is built (``Routing``), so the step has static
shapes and CUDA graphs capture it: ``uniform_routing`` draws each token's ``top_k`` distinct experts
uniformly (the roofline's default router, ``cost_models.moe``); ``forced_routing`` sends the tokens to
exactly ``distinct`` experts with balanced loads (the ``experts`` sweep: the step time against the
number of distinct experts touched at a fixed token count). The router's own logits and top-k still
run, so their cost is measured; only the dispatch follows the plan. Router variants (DeepSeek's
sigmoid with group-limited top-k, Llama 4's sigmoid top-1) are timed as a softmax top-k: the same
GEMM and a kernel of the same size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specplan.cost_models.models import MoESpec


@dataclass(frozen=True)
class Routing:
    """A step's token-to-expert assignment, grouped by expert.

    ``rows``: the token of each assignment, sorted by expert (``[tokens * top_k]``); ``slots``: each
    assignment's position in the flat ``[tokens, top_k]`` choice table (to gather its routing weight);
    ``choices``: that table (``[tokens, top_k]`` expert ids); ``segments``: ``(expert, start, end)`` of
    each touched expert's rows in the sorted order.
    """

    rows: torch.Tensor
    slots: torch.Tensor
    choices: torch.Tensor
    segments: tuple[tuple[int, int, int], ...]

    @property
    def distinct(self) -> int:
        """Experts touched."""
        return len(self.segments)


def routing_from_choices(choices: torch.Tensor) -> Routing:
    """The grouped ``Routing`` of a ``[tokens, top_k]`` table of expert ids (read on the host once)."""
    flat = choices.reshape(-1)
    order = torch.argsort(flat, stable=True)
    experts, counts = torch.unique_consecutive(flat[order], return_counts=True)
    bounds = [0, *torch.cumsum(counts, 0).tolist()]
    segments = tuple((int(e), bounds[i], bounds[i + 1]) for i, e in enumerate(experts.tolist()))
    return Routing(rows=order // choices.shape[1], slots=order, choices=choices, segments=segments)


def uniform_routing(tokens: int, moe: MoESpec, gen: torch.Generator, device: str) -> Routing:
    """Each token's ``top_k`` distinct experts drawn uniformly of ``num_experts`` (independent tokens)."""
    scores = torch.rand((tokens, moe.num_experts), generator=gen, device=device)
    return routing_from_choices(scores.topk(moe.top_k, dim=-1).indices)


def forced_routing(tokens: int, moe: MoESpec, distinct: int, gen: torch.Generator, device: str) -> Routing:
    """Tokens sent to exactly ``distinct`` experts (a random subset), round-robin: token ``t``'s ``j``-th
    choice is the subset's ``(t * top_k + j) mod distinct``-th expert, so every one is touched and loads
    differ by at most one assignment. Needs ``top_k <= distinct <= min(num_experts, tokens * top_k)``."""
    k = moe.top_k
    if not k <= distinct <= min(moe.num_experts, tokens * k):
        raise ValueError(f"distinct experts {distinct} outside [{k}, {min(moe.num_experts, tokens * k)}]")
    subset = torch.randperm(moe.num_experts, generator=gen, device=device)[:distinct]
    slots = torch.arange(tokens * k, device=device).view(tokens, k)
    return routing_from_choices(subset[slots % distinct])


def moe_weights(moe: MoESpec, hidden: int, tp: int, device: str, dtype: torch.dtype, rand) -> dict:
    """Router, stacked expert weights (``[E, 2w, h]`` gate/up and ``[E, h, w]`` down) and shared experts of
    one MoE layer, one GPU's TP shard; ``rand(shape)`` draws a random tensor."""
    w, s = moe.expert_intermediate // tp, moe.shared_intermediate // tp
    lay = {"router": rand((moe.num_experts, hidden)), "experts_gu": rand((moe.num_experts, 2 * w, hidden)),
           "experts_down": rand((moe.num_experts, hidden, w))}
    if s:
        lay.update(shared_gu=rand((2 * s, hidden)), shared_down=rand((hidden, s)))
    return lay


def moe_mlp(lay: dict, y: torch.Tensor, top_k: int, routing: Routing | None, linear=F.linear) -> torch.Tensor:
    """The MoE MLP of normed hidden states ``y`` ``[tokens, hidden]`` (module docstring). ``routing`` None
    routes by the router's own top-k (eager only: the grouping is read on the host). ``linear``: the
    router's and shared experts' GEMM (the stack's)."""
    probs = linear(y, lay["router"]).softmax(-1, dtype=torch.float32)
    weights, chosen = probs.topk(top_k, dim=-1)
    if routing is None:
        routing = routing_from_choices(chosen)
    else:  # the planned experts' weights: the top-k above is timed, the dispatch follows the plan
        weights = probs.gather(1, routing.choices)
    xs = y.index_select(0, routing.rows)
    width = lay["experts_down"].shape[-1]
    gate_up = xs.new_empty((xs.shape[0], 2 * width))
    for e, start, end in routing.segments:
        torch.matmul(xs[start:end], lay["experts_gu"][e].t(), out=gate_up[start:end])
    act = F.silu(gate_up[:, :width]) * gate_up[:, width:]
    down = torch.empty_like(xs)
    for e, start, end in routing.segments:
        torch.matmul(act[start:end], lay["experts_down"][e].t(), out=down[start:end])
    down *= weights.reshape(-1).index_select(0, routing.slots).to(down.dtype)[:, None]
    out = torch.zeros_like(y).index_add_(0, routing.rows, down)
    if "shared_gu" in lay:
        gate, up = linear(y, lay["shared_gu"]).chunk(2, -1)
        out += linear(F.silu(gate) * up, lay["shared_down"])
    return out
