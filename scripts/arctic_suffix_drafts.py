"""Arctic Inference's own suffix decoding drafts on the bundled traces, and specplan's against them.

Arctic's ``SuffixDecodingCache`` (PyPI ``arctic-inference``, C++ ``csrc/suffix_decoding``) is driven
the way vLLM's ``SuffixDecodingProposer.propose`` drives it (``vllm/v1/spec_decode/suffix_decoding.py``):
``start_request`` with the prompt at the first proposal (after the prefill sampled one token), then
every step ``add_active_response`` with the newly committed tokens and ``speculate`` on the last
``max_tree_depth`` tokens with ``max_spec_tokens = K`` (no ``max_model_len`` bound: the traces are far
from it), ``max_spec_factor`` and ``min_token_prob``; the finished request's last tokens are added
before ``stop_request``. Requests run one at a time in trace order; a step commits the accepted
prefix of the draft plus one token, as ``specplan acceptance`` replays do. specplan's
``SuffixDecodingOracle`` is driven along the same steps and its drafts compared.

Building Arctic's module (no CUDA or torch; cmake, g++ and a venv with nanobind 2.9.2)::

    pip download --no-deps --no-binary :all: arctic-inference==0.3.0 -d /tmp/arctic
    tar xzf /tmp/arctic/arctic_inference-0.3.0.tar.gz -C /tmp/arctic
    cmake -S /tmp/arctic/arctic_inference-0.3.0/csrc/suffix_decoding -B /tmp/arctic/build \\
          -DPython_EXECUTABLE=$VENV/bin/python && make -C /tmp/arctic/build
    # then a package arctic_inference/suffix_decoding/ holding the sdist's __init__.py and cache.py
    # and the built _C*.so, with an empty arctic_inference/__init__.py, on the venv's path

Usage::

    python scripts/arctic_suffix_drafts.py compare [--k 4] [--max-cached 10000] [TRACE ...]
    python scripts/arctic_suffix_drafts.py table tests/data/drafters/arctic_suffix_drafts.json

``compare`` prints, per bundled trace, the steps and the share whose drafts differ. ``table``
writes the drafts of the cases in ``TABLE_CASES`` (what ``tests/test_suffix_arctic.py`` checks).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specplan.acceptance.drafters import DrafterSettings, build_drafter
from specplan.acceptance.drafters.base import lcp
from specplan.workloads.bundled import bundled_traces, get_bundled
from specplan.workloads.tokentrace import read_token_trace

#: (trace, first requests, K, max_tree_depth, max_cached_requests): a repetitive code trace, a chat
#: trace with a small global cache (so responses are evicted and their counts taken out), and K = 8.
TABLE_CASES = [("aider", 6, 4, 24, 10000), ("specbench", 12, 4, 24, 4), ("mtbench", 8, 8, 16, -1)]


def arctic_steps(requests, k, depth, max_cached, factor=1.0, min_prob=0.1):
    """Yield (rid, committed, Arctic's draft) for every step of every request, in order."""
    from arctic_inference.suffix_decoding import SuffixDecodingCache

    cache = SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=max_cached)
    for rid, req in enumerate(requests):
        tokens = np.array(req.tokens, dtype=np.int32)
        P, O = req.prompt_len, req.output_len
        cache.start_request(rid, np.array(req.prompt_ids, dtype=np.int32))  # writable: nanobind refuses read-only arrays
        added = 0
        c = 1
        while c < O:
            cache.add_active_response(rid, tokens[P + added:P + c])
            added = c
            pattern = tokens[max(0, P + c - depth):P + c]
            draft = cache.speculate(rid, pattern, max_spec_tokens=k, max_spec_factor=factor,
                                    min_token_prob=min_prob).token_ids
            yield rid, c, list(draft)
            c += min(lcp(np.asarray(draft, dtype=np.int32), req.output_ids[c:]) + 1, O - c)
        cache.add_active_response(rid, tokens[P + added:P + O])
        cache.stop_request(rid)


def specplan_drafts(requests, steps, k, depth, max_cached):
    """specplan's drafts along the given (rid, committed) steps, finishing each request after its last."""
    settings = DrafterSettings(kind="suffix", max_draft_len=k, suffix_max_tree_depth=depth,
                               suffix_max_cached_requests=max_cached)
    oracle = build_drafter(settings, requests)
    out = []
    by_rid = {}
    for rid, c in steps:
        by_rid.setdefault(rid, []).append(c)
    for rid in range(len(requests)):
        for c in by_rid.get(rid, []):
            out.append(oracle.propose(rid, c, k).tolist())
        oracle.on_finish(np.array([rid]))
    return out


def compare(names, k, depth, max_cached):
    total = differ = 0
    for name in names:
        requests = read_token_trace(get_bundled(name).path)
        steps = list(arctic_steps(requests, k, depth, max_cached))
        mine = specplan_drafts(requests, [(r, c) for r, c, _ in steps], k, depth, max_cached)
        d = sum(a != b for (_, _, a), b in zip(steps, mine))
        print(f"{name}: {len(steps)} steps, {d} drafts differ ({100 * d / max(len(steps), 1):.2f}%)", flush=True)
        total += len(steps)
        differ += d
    print(f"all: {total} steps, {differ} differ ({100 * differ / max(total, 1):.2f}%)")


def table(path):
    cases = []
    for name, n, k, depth, max_cached in TABLE_CASES:
        requests = read_token_trace(get_bundled(name).path)[:n]
        steps = [[rid, c, d] for rid, c, d in arctic_steps(requests, k, depth, max_cached)]
        cases.append({"trace": name, "ids": [r.id for r in requests], "k": k, "max_tree_depth": depth,
                      "max_cached_requests": max_cached, "steps": steps})
        print(f"{name}: {len(steps)} steps")
    meta = {"made_by": "scripts/arctic_suffix_drafts.py table", "arctic_inference": "0.3.0",
            "driver": "vLLM SuffixDecodingProposer.propose call order; one request at a time"}
    Path(path).write_text(json.dumps({"meta": meta, "cases": cases}, separators=(",", ":")) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("traces", nargs="*")
    c.add_argument("--k", type=int, default=4)
    c.add_argument("--depth", type=int, default=24)
    c.add_argument("--max-cached", type=int, default=10000)
    t = sub.add_parser("table")
    t.add_argument("path")
    args = ap.parse_args(argv)
    if args.cmd == "compare":
        compare(args.traces or sorted(bundled_traces("workload")), args.k, args.depth, args.max_cached)
    else:
        table(args.path)


if __name__ == "__main__":
    main()
