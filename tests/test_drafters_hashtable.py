"""The drafters' open-addressing table against a Python dict: inserts, overwrites and deletions
(backward shift) in any order leave every key reachable, on a small table where probe runs wrap."""

import numpy as np

from specplan.acceptance.drafters._hashtable import grown_table, ht_delete, ht_get, ht_put


def test_random_inserts_and_deletes_agree_with_a_dict():
    rng = np.random.default_rng(7)
    keys, vals = np.full(64, -1, dtype=np.int64), np.full(64, -1, dtype=np.int32)
    ref: dict[int, int] = {}
    for step in range(20000):
        key = int(rng.integers(0, 80))  # few distinct keys: many collide, runs wrap around slot 63
        if key in ref and rng.random() < 0.5:
            assert ht_delete(keys, vals, key) == 1
            del ref[key]
        elif len(ref) < 32 or key in ref:  # at most half load, as callers keep it
            ref[key] = step
            ht_put(keys, vals, key, step)
        for probe in rng.integers(0, 80, 4).tolist():
            assert ht_get(keys, vals, probe) == ref.get(probe, -1)
    assert ht_delete(keys, vals, 10**6) == 0
    bigger_keys, bigger_vals = grown_table(keys, vals, 100)
    assert bigger_keys.shape[0] == 256
    assert all(ht_get(bigger_keys, bigger_vals, k) == v for k, v in ref.items())
