"""The gamma(B, K) view of any cost model, and its table and plot renderings.

gamma(B, K) = (T(B, 1+K) - T(B, 1)) / (K * T(B, 1)) at one context length, with T the model's
``step_time`` of a uniform generation batch (``CostModel.gamma``). It is a reporting view derived
from step times, never a fitted primitive (COSTS.md §2a, §3).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Sequence

from specplan.cost_models.base import CostModel, StepBatch

BATCH_SIZES = tuple(range(1, 257))
DRAFT_LENS = tuple(range(1, 9))


def gamma_view(model: CostModel, context: int = 1024, batch_sizes: Sequence[int] = BATCH_SIZES,
               draft_lens: Sequence[int] = DRAFT_LENS) -> dict:
    """``{"context", "B", "t_base_s", "gamma": {"K": [...]}}`` with T(B, 1) and gamma(B, K) per B."""
    return {
        "context": context,
        "B": list(batch_sizes),
        "t_base_s": [model.step_time(StepBatch.decode(b, 1, context)) for b in batch_sizes],
        "gamma": {str(k): [model.gamma(b, k, context) for b in batch_sizes] for k in draft_lens},
    }


def render_table(view: dict, title: str):
    """A rich ``Table``: one row per B with T(B, 1) in ms and gamma for each K."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("B", justify="right")
    table.add_column("T(B,1) ms", justify="right")
    for k in view["gamma"]:
        table.add_column(f"γ K={k}", justify="right")
    for i, b in enumerate(view["B"]):
        table.add_row(str(b), f"{view['t_base_s'][i] * 1e3:.3f}", *(f"{g[i]:.3f}" for g in view["gamma"].values()))
    return table


def measured_mask(b: Sequence[int], query_len: int, context: int, measured) -> list[bool]:
    """Per B: whether a uniform batch of B rows of ``query_len`` tokens at ``context`` lies inside a
    profile's ``measured_range`` (batch, total tokens, context); everything is inside when None."""
    if measured is None:
        return [True] * len(b)
    lo, hi = measured.tokens
    return [x <= measured.max_batch and lo <= x * query_len <= hi and context <= measured.max_context for x in b]


def _split_plot(ax, b, y, inside, **style) -> None:
    """Solid where measured, dashed in the same colour (and unlabelled) where extrapolated; the dashed
    part starts at the last measured point so the curve stays joined."""
    solid = ax.plot([x if m else None for x, m in zip(b, inside)], [v if m else None for v, m in zip(y, inside)],
                    "-", **style)[0]
    style.pop("label", None)
    style["color"] = solid.get_color()
    outside = [not m or (i + 1 < len(inside) and not inside[i + 1]) for i, m in enumerate(inside)]
    if not all(inside):
        ax.plot([x if o else None for x, o in zip(b, outside)], [v if o else None for v, o in zip(y, outside)], "--",
                alpha=0.6, **style)


def plot_view(view: dict, title: str, out: str | Path, measured=None) -> None:
    """Draw T(B, 1) and gamma(B, K) against B, one curve per K, to an image file.

    With a measured profile's ``measured_range``, each curve is solid where the calibration grid
    covered it and dashed where it extrapolates, and the batch sizes past the measured edge are shaded.
    """
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_g) = plt.subplots(1, 2, figsize=(11, 4.2))
    b, ctx = view["B"], view["context"]
    _split_plot(ax_t, b, [t * 1e3 for t in view["t_base_s"]], measured_mask(b, 1, ctx, measured), color="black")
    ax_t.set(xlabel="batch size B", ylabel="T(B, 1) [ms]", title="decode step time")
    for k, g in view["gamma"].items():
        _split_plot(ax_g, b, g, measured_mask(b, 1 + int(k), ctx, measured), label=f"K={k}")
    ax_g.set(xlabel="batch size B", ylabel="γ(B, K)", title=f"cost per verified position, context {ctx}")
    if measured is not None:
        edge = measured.max_batch if ctx <= measured.max_context else min(b)
        what = (f"extrapolated (beyond measured B ≤ {measured.max_batch})" if ctx <= measured.max_context
                else f"extrapolated (context {ctx} > measured {measured.max_context})")
        for ax in (ax_t, ax_g):
            if edge < max(b):
                ax.axvspan(edge, max(b), color="tab:orange", alpha=0.12, label=what if ax is ax_g else None)
            ax.axvline(edge, color="tab:orange", lw=1.0)
    ax_g.legend(ncol=2, fontsize=8)
    for ax in (ax_t, ax_g):
        ax.grid(alpha=0.3)
    fig.suptitle(textwrap.fill(title, 140), fontsize=9)
    fig.tight_layout()
    from specplan.atomic import atomic_write

    # The temporary name ends in .tmp, so the image format is named explicitly.
    atomic_write(out, lambda tmp: fig.savefig(tmp, format=Path(out).suffix.lstrip(".") or "png", dpi=120))
    plt.close(fig)
