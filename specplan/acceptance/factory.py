"""The one factory the simulator calls: a scenario's acceptance section (and drafter) into an oracle.

The drafters (numba) and recorded logs are imported only when a scenario uses them.
"""

from __future__ import annotations

import numpy as np

from specplan.acceptance.oracles import AcceptanceOracle, alpha_oracle, length_dist_oracle, per_position_oracle
from specplan.config import SimConfig, SpeculationConfig
from specplan.errors import ConfigError


def build_oracle(cfg: SimConfig, requests: list, prompt_lens: np.ndarray, output_lens: np.ndarray,
                 drafter_cache=None) -> AcceptanceOracle:
    """The acceptance oracle of a (resolved) scenario: the exact drafter, a parametric or recorded one,
    or the SA enhancer over a model-based drafter's acceptance.

    ``prompt_lens`` / ``output_lens`` are the requests' lengths as the executor sees them;
    ``drafter_cache`` shares precomputed drafter tables between runs.
    """
    sp = cfg.speculation
    if sp.sa_config is not None:
        from specplan.acceptance.drafters import make_drafter_oracle
        from specplan.acceptance.enhancer import SAEnhancedOracle

        sa_spec = SpeculationConfig(decoding_type="SA", max_draft_len=sp.max_draft_len,
                                    enable_global_pool=sp.sa_config.enable_global_pool)
        neural = build_oracle(cfg.model_copy(update={"speculation": sp.model_copy(update={"sa_config": None})}),
                              requests, prompt_lens, output_lens)
        sa = make_drafter_oracle(sa_spec, requests, cfg.engine.max_batch_size, drafter_cache)
        return SAEnhancedOracle(neural, sa, sp.sa_config.threshold)
    a = cfg.acceptance
    args = (prompt_lens, output_lens)
    seed = int(np.random.default_rng([cfg.seed, 2]).integers(2**31))
    if a.mode == "alpha":
        return alpha_oracle(a.alpha, *args, seed=seed, max_k=max(cfg.speculation.max_draft_len, 1))
    if a.mode == "per_position":
        if not a.per_position:
            raise ConfigError("acceptance.per_position: give the conditional rates a_1..a_K")
        return per_position_oracle(a.per_position, *args, seed=seed)
    if a.mode == "length_dist":
        if not a.length_dist:
            raise ConfigError("acceptance.length_dist: give P(accepted = 0), P(accepted = 1), ...")
        return length_dist_oracle(a.length_dist, *args, seed=seed)
    if a.mode == "recorded":
        if not a.recorded_path:
            raise ConfigError("acceptance.recorded_path: name a recorded acceptance log (e.g. specbench-eagle) or a file")
        from specplan.acceptance.recorded import recorded_oracle

        return recorded_oracle(a.recorded_path, requests)
    if cfg.speculation.decoding_type == "none":
        return alpha_oracle(0.0, *args, seed=seed)  # never asked: speculation is off
    from specplan.acceptance.drafters import make_drafter_oracle

    return make_drafter_oracle(cfg.speculation, requests, cfg.engine.max_batch_size, drafter_cache,
                               cfg.engine.max_model_len)
