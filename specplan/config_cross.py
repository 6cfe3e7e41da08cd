"""Rules across a scenario's sections, checked by ``SimConfig`` once every section is valid.

Each refusal is a ``CrossSectionError`` carrying the field the user should change, since pydantic
places a whole-model error at the root.
"""

from __future__ import annotations

from specplan.config_rules import NEURAL_DRAFTERS


class CrossSectionError(ValueError):
    """A rule across sections; ``field`` is the dotted setting the error line names."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def cross_section_rules(cfg) -> None:
    """Refuse settings that contradict each other across sections of the ``SimConfig`` ``cfg``."""
    sp, mode = cfg.speculation, cfg.acceptance.mode
    if sp.decoding_type in NEURAL_DRAFTERS and mode == "drafter":
        raise CrossSectionError("acceptance.mode", f"{sp.decoding_type} is a model-based drafter; give its "
                                "acceptance (alpha, per_position, length_dist or recorded)")
    if sp.sa_config is not None and sp.decoding_type not in NEURAL_DRAFTERS:
        raise CrossSectionError("speculation.sa_config", "the SA enhancer applies to MTP or Eagle3 drafters")
    dist = cfg.acceptance.length_dist
    if mode == "length_dist" and dist and sp.decoding_type != "none" and 0 < sp.max_draft_len < len(dist) - 1:
        raise CrossSectionError(
            "acceptance.length_dist", f"{len(dist)} probabilities (0..{len(dist) - 1} accepted) but "
            f"speculation.max_draft_len {sp.max_draft_len} accepts at most {sp.max_draft_len}; "
            "trim it or raise max_draft_len")
    tps, cost = cfg.cluster.tp, cfg.cost
    if tps and len(set(tps)) > 1 and (cost.model not in ("roofline", "profile") or cost.profile):
        # Only the analytic model and profiles named by degree price a TP4 replica apart from a TP1 one.
        raise CrossSectionError(
            "cluster.tp", f"mixed degrees {tps}, but cost.model {cost.model}"
            f"{' with one cost.profile' if cost.profile else ''} prices every replica alike; use roofline "
            "or a profile named by gpu/model (picked per degree), or one degree")
    # A setting given in two places, where one would silently win, is refused naming both.
    e, tps, tp = cfg.engine, cfg.cluster.tp, cfg.cost.tp
    if e.kv_num_blocks is not None and e.kv_budget_gb is not None:
        raise CrossSectionError("engine.kv_budget_gb", "give engine.kv_num_blocks or kv_budget_gb, not both "
                                "(kv_num_blocks would win)")
    if tps and cfg.cluster.replicas == 1 and tps != [tp]:
        raise CrossSectionError("cluster.tp", f"{tps} for one replica, whose degree is cost.tp ({tp}); set "
                                "cost.tp instead")
    if tps and "tp" in cfg.cost.model_fields_set and tp not in tps:
        raise CrossSectionError("cost.tp", f"{tp} is unused: cluster.tp {tps} gives every replica's degree; "
                                "drop one of them")
