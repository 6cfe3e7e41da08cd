"""Validation scenarios: the bundled ``low`` and ``high`` ones, or a scenario file, bound to a profile.

Both bundled scenarios are closed loop with no think time, so the schedule does not depend on step
times: the replay's measured steps re-time exactly the iterations the simulator ran. Requests are
synthetic copy-process text (half of the tokens copied from earlier spans), so the suffix-automaton
drafter finds real matches, and every scenario drafts with TensorRT-LLM's SA drafter:

- ``low``: two clients, K = 4 on every step (low load, speculation at full depth);
- ``high``: as many clients as the batch holds, K from a ``draft_len_schedule`` that shrinks as the
  batch grows, chunked prefill mixing prompt chunks with verify rows.

Sizes depend on the device: on a GPU, 1K-token prompts and under 200 iterations per scenario (both
replay an 8B model in a few minutes); on a CPU, the small shapes the ``tiny`` model's CPU profile covers
(at most 256 tokens per step, contexts under 1K, about 40 iterations per scenario).

A scenario file is a ``specplan simulate`` config; its ``cost`` section is replaced by the profile
being validated (its cost options, such as ``host_overhead_s``, are kept).
"""

from __future__ import annotations

import copy
from pathlib import Path

from specplan.config import SimConfig, build_config, read_yaml
from specplan.errors import ConfigError

BUNDLED = ("low", "high")

_BASE = {
    "seed": 0,
    "engine": {"engine": "trtllm", "capacity_scheduler_policy": "GUARANTEED_NO_EVICT", "enable_chunked_prefill": True,
               "kv_num_blocks": 100000},
    "speculation": {"decoding_type": "SA", "max_draft_len": 4},
    "acceptance": {"mode": "drafter"},
    "workload": {"arrival": "closed_loop", "think_time_s": 0.0},
}

# (scenario, device class) -> engine limits, clients, requests, lengths and the K schedule.
_SIZES = {
    ("low", "cuda"): dict(batch=8, tokens=2048, clients=2, requests=4, prompt=1024, output=256, schedule=None),
    ("high", "cuda"): dict(batch=64, tokens=4096, clients=64, requests=128, prompt=1024, output=128,
                           schedule={8: 4, 32: 2, 64: 1}),
    ("low", "cpu"): dict(batch=4, tokens=256, clients=2, requests=4, prompt=128, output=48, schedule=None),
    ("high", "cpu"): dict(batch=16, tokens=256, clients=16, requests=24, prompt=96, output=32,
                          schedule={4: 4, 8: 2, 16: 1}),
}


def bundled_scenario(name: str, device: str) -> dict:
    """The config mapping of a bundled scenario for ``device`` (``cuda`` or ``cpu``), without a cost section."""
    size = _SIZES[(name, "cuda" if device == "cuda" else "cpu")]
    data = copy.deepcopy(_BASE)
    data["engine"].update(max_batch_size=size["batch"], max_num_tokens=size["tokens"])
    if size["schedule"] is not None:
        data["speculation"]["draft_len_schedule"] = dict(size["schedule"])
    data["workload"].update(
        trace=f"synthetic:copy_prob=0.5,span_len=16,prompt_len={size['prompt']},output_len={size['output']}",
        concurrency=size["clients"], num_requests=size["requests"])
    return data


def scenario_config(scenario: str, device: str, profile: str, model_name: str) -> tuple[str, SimConfig]:
    """``(label, config)`` for a bundled scenario name or a scenario file, priced by ``profile``.

    The cost section becomes ``model: profile`` with ``profile``; ``model_name`` (the replayed model)
    sizes the default KV capacity. On a CPU there are no CUDA graphs, so graph padding is off.
    """
    if scenario in BUNDLED:
        data, label, source = bundled_scenario(scenario, device), scenario, f"bundled scenario {scenario}"
    else:
        path = Path(scenario)
        if not path.is_file():
            raise ConfigError(f"--scenario {scenario!r}: not a bundled scenario ({', '.join(BUNDLED)}) "
                              "and no such file")
        data, label, source = read_yaml(path), path.stem, str(path)
    cost = dict(data.get("cost") or {})
    cost.update(model="profile", profile=profile, model_name=model_name)
    if device != "cuda":
        cost["cuda_graph_padding"] = False
    data["cost"] = cost
    return label, build_config(data, source)
