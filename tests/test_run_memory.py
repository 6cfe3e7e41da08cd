"""Memory flat across runs: a process of many small runs through the sweep worker's own task holds,
after 200 runs, what it held after 20 (no collection forced: a run must be freed by reference
counting, or its logs wait for a full collection that such a process may not reach for thousands of
runs); a fleet's executors are freed with its result; the shared drafter-table cache keeps to its
bound, least recently used dropped first."""

import subprocess
import sys
import textwrap

import numpy as np

from specplan.acceptance.drafters.cache import PrecomputeCache

WORKER = textwrap.dedent("""
    import gc, json, sys, tracemalloc
    from specplan.config import build_config
    from specplan.sweeps.records import config_json
    from specplan.sweeps.runners import run_record

    base = {"seed": 0, "engine": {"engine": "trtllm", "max_batch_size": 8, "kv_num_blocks": 100000},
            "speculation": {"decoding_type": "NGram", "max_draft_len": 3},
            "acceptance": {"mode": "alpha", "alpha": 0.7},
            "workload": {"trace": None, "arrival": "poisson", "rate": 32.0, "num_requests": 20, "prompt_len": 32,
                         "output_len": 16},
            "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.1}}
    drafter = {"acceptance": {"mode": "drafter"},
               "workload": {"trace": "specbench", "arrival": "poisson", "rate": 32.0, "num_requests": 12}}
    configs = []
    for k in range(10):  # ten distinct points, K and seed varied, half replaying the NGram drafter
        cfg = json.loads(json.dumps({**base, **(drafter if k % 2 else {})}))
        cfg["seed"], cfg["speculation"]["max_draft_len"] = k // 2, k % 4
        configs.append(config_json(build_config(cfg)))
    tracemalloc.start()
    seen = {}
    for i in range(200):
        run_record(configs[i % len(configs)])
        if i + 1 in (20, 200):
            seen[i + 1] = (len(gc.get_objects()), tracemalloc.get_traced_memory()[0])
    print(json.dumps(seen))
""")


def test_two_hundred_runs_hold_what_twenty_held():
    proc = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    seen = {int(k): v for k, v in __import__("json").loads(proc.stdout.strip().splitlines()[-1]).items()}
    (objects_20, traced_20), (objects_200, traced_200) = seen[20], seen[200]
    # a run left in a cycle kept 70 objects and 3 MB of logs; 180 more runs may add neither
    assert objects_200 - objects_20 <= 50, (objects_20, objects_200)
    assert traced_200 - traced_20 <= 256 * 1024, (traced_20, traced_200)


def test_a_fleets_executors_are_freed_with_its_result():
    import gc
    import weakref

    from specplan.config import build_config
    from specplan.simulator.engine import Executor
    from specplan.simulator.run import simulate

    made: list = []
    init = Executor.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(weakref.ref(self))

    cfg = build_config({"seed": 2, "engine": {"max_batch_size": 4, "kv_num_blocks": 20000},
                        "speculation": {"decoding_type": "NGram", "max_draft_len": 2},
                        "acceptance": {"mode": "alpha", "alpha": 0.6}, "cluster": {"replicas": 3},
                        "workload": {"trace": None, "arrival": "poisson", "rate": 40.0, "num_requests": 30,
                                     "prompt_len": 16, "output_len": 8},
                        "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.1}})
    Executor.__init__ = spy
    was = gc.isenabled()
    gc.disable()  # freed by reference counting alone
    try:
        result = simulate(cfg)
        assert len(result.requests) == 30 and len(made) == 3
        del result
        assert [ref() for ref in made] == [None, None, None]
    finally:
        Executor.__init__ = init
        if was:
            gc.enable()


def test_the_cache_keeps_to_its_bound_least_recently_used_dropped_first():
    class Req:
        def __init__(self, i):
            self.prompt_len, self.output_len, self.max_new_tokens = 2, 2, None
            self.prompt_ids, self.output_ids = np.array([i, i]), np.array([i, 0])

    reqs = [Req(i) for i in range(4)]
    computed = []

    def compute(r):
        computed.append(int(r.prompt_ids[0]))
        return {"x": np.full(8, r.prompt_ids[0], dtype=np.int64)}  # 64 bytes a table

    cache = PrecomputeCache(max_bytes=3 * 64)
    first = cache.tables("t", reqs[:3], compute)
    cache.tables("t", reqs[:1], compute)  # request 0 used again: request 1 is now the oldest
    cache.tables("t", reqs[3:], compute)  # a fourth table: over the bound, request 1 dropped
    assert computed == [0, 1, 2, 3]
    again = cache.tables("t", reqs[:3], compute)  # 0 and 2 cached, 1 computed again (and 3 dropped)
    assert computed == [0, 1, 2, 3, 1]
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(first, again))
    assert cache.hits == 1 + 2 and cache.misses == 3 + 1 + 1
