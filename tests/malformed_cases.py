"""The malformed inputs of test_malformed_inputs: ``CASES`` rows of (id, argv, files, needle), where
``files`` maps a name under the case's temporary folder to its content, ``{root}`` in argv is that
folder, and ``needle`` must appear in the one error line (the option, field or file at fault)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import yaml

GOOD_TOKEN = {"id": "a", "prompt_ids": [1, 2, 3], "output_ids": [4, 5]}
GOOD_PROFILE = {
    "format": "specplan-profile/1", "name": "test/hand", "provenance": {"kind": "measured", "source": "hand"},
    "gpu": "h200", "tp": 1, "model_shape": {"name": "hand", "num_layers": 2, "hidden": 64, "vocab": 100},
    "token_time": {"tokens": [1, 100, 1000], "seconds": [1e-3, 2e-3, 11e-3]},
    "lm_head_time": {"tokens": [1, 1000], "seconds": [1e-4, 1.1e-3]},
    "attention": {"kv_s_per_token": 1e-7, "decode_work_s": 1e-9, "prefill_work_s": 2e-9},
    "measured_range": {"tokens": [1, 1000], "logit_tokens": [1, 1000], "max_context": 4096, "max_batch": 256},
}


def _merge(base: dict, dotted: str, value) -> dict:
    out = json.loads(json.dumps(base))
    node = out
    *parents, last = dotted.split(".")
    for p in parents:
        node = node[p]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return out


DELETE = object()


class Files:
    """Builds the malformed files a case needs under one temporary folder; ``{name}`` in argv expands."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "afile").write_text("a regular file\n")
        (root / "adir").mkdir()

    def text(self, name: str, text: str | bytes) -> str:
        path = self.root / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return str(path)


# --- the cases: (id, argv, files {name: content}, needle in the message) --------------------------

CASES: list[tuple[str, list[str], dict, str]] = []


def case(cid: str, argv: list[str], needle: str, files: dict | None = None) -> None:
    CASES.append((cid, argv, files or {}, needle))


# CLI usage: typos, missing arguments, bad option values, on every command.
for typo in ("simulat", "simulte", "acceptence", "workload", "profiles", "calibrat", "swep", "reprot", "recomend",
             "validat"):
    case(f"typo-{typo}", [typo], typo)
case("simulate-format-xml", ["simulate", "--format", "xml"], "--format")
case("acceptance-format-xml", ["acceptance", "mtbench", "--drafter", "ngram", "--format", "xml"], "--format")
case("profile-show-format-xml", ["profile", "show", "h200/llama-3.1-8b", "--format", "xml"], "--format")
case("acceptance-no-drafter", ["acceptance", "mtbench"], "--drafter")
case("acceptance-no-trace", ["acceptance"], "TRACE")
case("acceptance-bad-drafter", ["acceptance", "mtbench", "--drafter", "eagle"], "--drafter")
case("validate-no-profile", ["validate", "--out", "{root}/v"], "--profile")
case("validate-no-out", ["validate", "--profile", "h200/llama-3.1-8b"], "--out")
case("calibrate-no-model", ["calibrate", "--out", "{root}/c"], "--model")
case("calibrate-no-out", ["calibrate", "--model", "tiny"], "--out")
case("sweep-no-spec", ["sweep", "--out", "{root}/s"], "SPEC")
case("sweep-no-out", ["sweep", "examples/sweep_k_rate.yaml"], "--out")
case("report-no-dir", ["report"], "SWEEP_DIR")
case("recommend-no-slo", ["recommend"], "--slo-tpot-ms")
case("profile-show-no-name", ["profile", "show"], "NAME")
case("profile-plot-no-out", ["profile", "plot", "h200/llama-3.1-8b"], "--out")
case("workloads-show-no-name", ["workloads", "show"], "NAME")
case("workloads-export-no-out", ["workloads", "export", "mtbench"], "--out")
case("set-without-value", ["simulate", "--set"], "--set")
for cmd, opt, bad in [
    (["profile", "show", "h200/llama-3.1-8b"], "--context", "-5"),
    (["profile", "show", "h200/llama-3.1-8b"], "--context", "lots"),
    (["profile", "plot", "h200/llama-3.1-8b", "--out", "{root}/p.png"], "--context", "-1"),
    (["calibrate", "--model", "tiny", "--out", "{root}/c"], "--tp", "0"),
    (["calibrate", "--model", "tiny", "--out", "{root}/c"], "--budget-s", "0"),
    (["calibrate", "--model", "tiny", "--out", "{root}/c"], "--budget-s", "soon"),
    (["calibrate", "--model", "tiny", "--out", "{root}/c"], "--layers", "0"),
    (["calibrate", "--model", "tiny", "--out", "{root}/c"], "--repeats", "0"),
    (["calibrate", "--model", "tiny", "--out", "{root}/c"], "--heldout", "0.9"),
    (["calibrate", "--model", "tiny", "--out", "{root}/c"], "--heldout", "0"),
    (["calibrate", "--model", "tiny", "--out", "{root}/c"], "--threads", "0"),
    (["calibrate", "--model", "tiny", "--out", "{root}/c"], "--seed", "x"),
    (["validate", "--profile", "h200/llama-3.1-8b", "--out", "{root}/v"], "--threads", "0"),
    (["validate", "--profile", "h200/llama-3.1-8b", "--out", "{root}/v"], "--warmup", "-1"),
    (["validate", "--profile", "h200/llama-3.1-8b", "--out", "{root}/v"], "--seed", "1.5"),
    (["sweep", "examples/sweep_k_rate.yaml", "--out", "{root}/s"], "--max-points", "0"),
    (["sweep", "examples/sweep_k_rate.yaml", "--out", "{root}/s"], "--workers", "many"),
    (["acceptance", "mtbench", "--drafter", "ngram"], "--max-draft-len", "four"),
    (["acceptance", "mtbench", "--drafter", "ngram"], "--max-batch-size", "1e3"),
    (["acceptance", "mtbench", "--drafter", "suffix"], "--suffix-min-token-prob", "high"),
    (["acceptance", "mtbench", "--drafter", "pld"], "--eos-token-id", "eos"),
    (["recommend"], "--slo-tpot-ms", "fast"),
    (["recommend", "--slo-tpot-ms", "10"], "--gate-window", "big"),
    (["recommend", "--slo-tpot-ms", "10"], "--probe-requests", "x"),
]:
    case(f"{cmd[0]}-{opt}-{bad}", [*cmd, opt, bad], opt)
for cmd in (["simulate"], ["acceptance", "mtbench", "--drafter", "ngram"], ["workloads", "list"], ["profile", "list"],
            ["sweep", "x.yaml", "--out", "o"], ["report", "d"], ["recommend", "--slo-tpot-ms", "1"],
            ["validate", "--profile", "p", "--out", "o"], ["calibrate", "--model", "tiny", "--out", "o"],
            ["workloads", "export", "mtbench", "--out", "o.jsonl"], ["profile", "plot", "x", "--out", "o.png"]):
    case(f"unknown-option-{'-'.join(cmd[:2])}", [*cmd, "--frobnicate"], "--frobnicate")

# recommend's own option rules
for opt, bad in (("--slo-tpot-ms", "0"), ("--slo-tpot-ms", "-3"), ("--slo-ttft-ms", "0"), ("--rates", "fast,slow"),
                 ("--rates", "-1"), ("--rates", ","), ("--bands", "1,x"), ("--bands", "0"), ("--bands", "1,8"),
                 ("--gate-window", "0"), ("--gate-window", "-5"), ("--probe-requests", "0"), ("--max-draft-len", "0")):
    argv = ["recommend", "examples/recommend_known_case.yaml", "--out", "{root}/rec", "--no-progress"]
    argv += ["--slo-tpot-ms", "10"] if opt != "--slo-tpot-ms" else []
    case(f"recommend{opt}={bad}", [*argv, opt, bad], opt.lstrip("-").split("-")[0])

# Config fields through --set: one bad value per field (the dotted field must be named).
BAD_FIELDS = [
    ("seed", "-1"), ("seed", "x"), ("seed", "1.5"),
    ("engine.engine", "sglang"), ("engine.max_batch_size", "0"), ("engine.max_batch_size", "-4"),
    ("engine.max_batch_size", "many"), ("engine.max_num_tokens", "0"), ("engine.max_num_active_requests", "0"),
    ("engine.kv_block_size", "0"), ("engine.kv_num_blocks", "0"), ("engine.kv_budget_gb", "0"),
    ("engine.kv_budget_gb", "-1"), ("engine.capacity_scheduler_policy", "FIFO"), ("engine.enable_chunked_prefill", "maybe"),
    ("engine.overlap_scheduler", "[1]"), ("engine.typo", "1"),
    ("speculation.decoding_type", "Medusa"), ("speculation.max_draft_len", "-1"), ("speculation.max_draft_len", "x"),
    ("speculation.global_pool_size", "0"), ("speculation.prompt_lookup_min", "0"), ("speculation.prompt_lookup_max", "0"),
    ("speculation.suffix_max_tree_depth", "0"), ("speculation.suffix_max_cached_requests", "-2"),
    ("speculation.suffix_max_spec_factor", "-1"), ("speculation.suffix_min_token_prob", "2"),
    ("speculation.pld_variant", "fast"), ("speculation.eos_token_ids", "x"), ("speculation.schedule_lookup", "middle"),
    ("speculation.k_from", "never"), ("speculation.max_concurrency", "0"), ("speculation.verify_width", "wide"),
    ("speculation.acceptance_rate_window_size", "-1"), ("speculation.acceptance_rate_threshold", "1.5"),
    ("speculation.acceptance_rate_threshold", "-0.1"), ("speculation.acceptance_window", "0"),
    ("speculation.acceptance_length_threshold", "-1"), ("speculation.gate_denominator", "tokens"),
    ("speculation.draft_len_schedule", "[1, 2]"), ("speculation.sa_config", "{threshold: 0}"),
    ("speculation.typo", "1"),
    ("acceptance.mode", "oracle"), ("acceptance.alpha", "1.5"), ("acceptance.alpha", "-0.5"), ("acceptance.alpha", "high"),
    ("acceptance.per_position", "[]"), ("acceptance.per_position", "[0.5, 1.5]"), ("acceptance.length_dist", "[]"),
    ("acceptance.length_dist", "[-0.1, 1.1]"), ("acceptance.length_dist", "[0, 0]"), ("acceptance.typo", "1"),
    ("workload.arrival", "burst"), ("workload.rate", "0"), ("workload.rate", "-2"), ("workload.cv", "0"),
    ("workload.concurrency", "0"), ("workload.think_time_s", "-1"), ("workload.num_requests", "0"),
    ("workload.num_requests", "1e9"), ("workload.num_requests", "1000000000"), ("workload.prompt_len", "0"),
    ("workload.output_len", "0"), ("workload.sample_with_replacement", "often"), ("workload.categories", "3"),
    ("workload.typo", "1"),
    ("cost.model", "magic"), ("cost.draft_cost_s", "-1"), ("cost.tp", "0"), ("cost.host_overhead_s", "-1"),
    ("cost.dtype", "int4"), ("cost.eta_mem", "0"), ("cost.eta_mem", "2"), ("cost.eta_comp", "0"), ("cost.eta_attn", "1.5"),
    ("cost.gemm_floor_s", "-1"), ("cost.small_kernels_per_layer", "-1"), ("cost.cuda_graph_max_tokens", "0"),
    ("cost.allreduce_beta_Bps", "0"), ("cost.draft_fraction", "-1"), ("cost.typo", "1"),
    ("slo_ttft_s", "0"), ("slo_tpot_s", "-1"), ("max_sim_time_s", "0"), ("nosuchsection", "1"),
]
for dotted, bad in BAD_FIELDS:
    case(f"set-{dotted}={bad}", ["simulate", "--set", f"{dotted}={bad}"], dotted.split(".")[-1])
for item, needle in (("noequals", "--set"), ("engine=3", "engine"), ("engine.max_batch_size.x=1", "max_batch_size"),
                     ("speculation.max_draft_len=[unclosed", "max_draft_len")):
    case(f"set-shape-{item}", ["simulate", "--set", item], needle)
# cross-field rules
case("length-dist-longer-than-k", ["simulate", "--set", "acceptance.mode=length_dist", "--set",
                                   "acceptance.length_dist=[0.1,0.1,0.1,0.1,0.1,0.5]", "--set",
                                   "speculation.max_draft_len=3"], "length_dist")
case("neural-drafter-mode", ["simulate", "--set", "speculation.decoding_type=MTP", "--set", "acceptance.mode=drafter"],
     "acceptance.mode")
case("sa-config-on-ngram", ["simulate", "--set", "speculation.decoding_type=NGram", "--set",
                            "speculation.max_matching_ngram_size=2", "--set", "speculation.sa_config={threshold: 4}"],
     "sa_config")
case("max-sim-time-cuts-everything", ["simulate", "--set", "max_sim_time_s=1e-9", "--set", "workload.num_requests=4",
                                      "--set", "acceptance.mode=alpha"], "max_sim_time_s")
case("num-requests-above-trace", ["simulate", "--set", "workload.num_requests=100000", "--set",
                                  "workload.trace=mtbench"], "num_requests")
case("unknown-trace", ["simulate", "--set", "workload.trace=nosuchtrace"], "nosuchtrace")
case("unknown-category", ["simulate", "--set", "workload.categories=[nosuchcat]"], "categories")

# Config files.
BAD_CONFIG_FILES = {
    "dup-key": ("speculation:\n  max_draft_len: 3\n  max_draft_len: 5\n", "max_draft_len"),
    "dup-section": ("engine: {max_batch_size: 8}\nengine: {max_batch_size: 16}\n", "engine"),
    "dup-flow-key": ("engine: {max_batch_size: 8, max_batch_size: 16}\n", "max_batch_size"),
    "not-utf8": (b"seed: 1\n\xff\xfe\n", "UTF-8"),
    "latin1": ("workload: {categories: [caf\xe9]}\n".encode("latin-1"), "UTF-8"),
    "bad-yaml": ("engine: {max_batch_size: 8\n", "invalid YAML"),
    "tab-indent": ("engine:\n\tmax_batch_size: 8\n", "invalid YAML"),
    "top-list": ("- 1\n- 2\n", "mapping"),
    "top-scalar": ("42\n", "mapping"),
    "section-scalar": ("engine: 3\n", "engine"),
    "unknown-section": ("enigne: {max_batch_size: 8}\n", "enigne"),
    "unknown-field": ("engine: {max_batch_sise: 8}\n", "max_batch_sise"),
    "negative-seed": ("seed: -7\n", "seed"),
    "bool-seed": ("seed: [1]\n", "seed"),
    "length-dist": ("acceptance: {mode: length_dist, length_dist: [0.2, 0.2, 0.2, 0.4]}\n"
                    "speculation: {max_draft_len: 2}\n", "length_dist"),
}
for name, (text, needle) in BAD_CONFIG_FILES.items():
    for cmd in (["simulate"], ["recommend", "--slo-tpot-ms", "10", "--out", "{root}/rec"]):
        case(f"config-{name}-{cmd[0]}", [cmd[0], "{root}/" + name + ".yaml", *cmd[1:]], needle,
             {name + ".yaml": text})
case("config-missing", ["simulate", "{root}/nosuch.yaml"], "nosuch.yaml")
case("config-directory", ["simulate", "{root}/adir"], "adir")
case("config-missing-recommend", ["recommend", "{root}/nosuch.yaml", "--slo-tpot-ms", "5"], "nosuch.yaml")

# Token traces, through every command that reads one.
TOK = json.dumps(GOOD_TOKEN)
BAD_TRACES = {
    "not-json.jsonl": ("{id: a}\n", "invalid JSON"),
    "missing-id.jsonl": (json.dumps({"prompt_ids": [1], "output_ids": [2]}) + "\n", "id"),
    "missing-output.jsonl": (json.dumps({"id": "a", "prompt_ids": [1]}) + "\n", "format"),  # not sniffed as tokens
    "str-tokens.jsonl": (json.dumps({**GOOD_TOKEN, "prompt_ids": ["a"]}) + "\n", "prompt_ids"),
    "float-tokens.jsonl": (json.dumps({**GOOD_TOKEN, "output_ids": [1.5]}) + "\n", "output_ids"),
    "bool-tokens.jsonl": (json.dumps({**GOOD_TOKEN, "output_ids": [True]}) + "\n", "output_ids"),
    "negative-token.jsonl": (json.dumps({**GOOD_TOKEN, "prompt_ids": [-1]}) + "\n", "prompt_ids"),
    "huge-token.jsonl": (json.dumps({**GOOD_TOKEN, "prompt_ids": [2**31]}) + "\n", "prompt_ids"),
    "huge-output-token.jsonl": (json.dumps({**GOOD_TOKEN, "output_ids": [2**40]}) + "\n", "output_ids"),
    "empty-prompt.jsonl": (json.dumps({**GOOD_TOKEN, "prompt_ids": []}) + "\n", "prompt_ids"),
    "empty-output.jsonl": (json.dumps({**GOOD_TOKEN, "output_ids": []}) + "\n", "output_ids"),
    "negative-arrival.jsonl": (json.dumps({**GOOD_TOKEN, "arrival_s": -1.0}) + "\n", "arrival_s"),
    "str-arrival.jsonl": (json.dumps({**GOOD_TOKEN, "arrival_s": "soon"}) + "\n", "arrival_s"),
    "str-turn.jsonl": (json.dumps({**GOOD_TOKEN, "turn": "first"}) + "\n", "turn"),
    "duplicate-id.jsonl": (TOK + "\n" + TOK + "\n", "duplicate id"),
    "array-record.jsonl": ("[1, 2, 3]\n", "jsonl"),
    "not-gzip.jsonl.gz": (b"plain text, not gzip\n", "gzip"),
    "truncated.jsonl.gz": (gzip.compress((TOK + "\n").encode() * 200, mtime=0)[:60], "gzip"),
    "not-utf8.jsonl": (b'{"id": "\xff"}\n', "UTF-8"),
    "empty.jsonl": ("", "empty.jsonl"),
}
for name, (text, needle) in BAD_TRACES.items():
    path = "{root}/" + name
    case(f"trace-{name}-show", ["workloads", "show", path], needle, {name: text})
    case(f"trace-{name}-export", ["workloads", "export", path, "--out", "{root}/x.jsonl"], needle, {name: text})
    case(f"trace-{name}-acceptance", ["acceptance", path, "--drafter", "ngram"], needle, {name: text})
    case(f"trace-{name}-simulate", ["simulate", "--set", f"workload.trace={path}", "--set", "workload.num_requests=1"],
         needle, {name: text})
case("trace-missing-output-as-tokens", ["workloads", "show", "{root}/t.jsonl", "--format", "tokens"], "output_ids",
     {"t.jsonl": json.dumps({"id": "a", "prompt_ids": [1]}) + "\n"})
case("trace-missing", ["workloads", "show", "{root}/nosuch.jsonl"], "nosuch.jsonl")
case("trace-unknown-format", ["workloads", "show", "{root}/t.jsonl", "--format", "klingon"], "klingon",
     {"t.jsonl": TOK + "\n"})

# Profiles: shown, plotted, and used by simulate.
BAD_PROFILES = [
    ("token_time.tokens", [100, 1, 1000], "tokens"), ("token_time.tokens", [1, 1, 1000], "tokens"),
    ("token_time.tokens", [0, 100, 1000], "tokens"), ("token_time.seconds", [1e-3, -2e-3, 1e-2], "seconds"),
    ("token_time.seconds", [0.0, 0.0, 0.0], "seconds"), ("token_time.seconds", [1e-3, 2e-3], "seconds"),
    ("token_time.seconds", [1e-3, ".nan", 1e-2], "seconds"), ("lm_head_time.tokens", [5], "tokens"),
    ("attention.kv_s_per_token", -1e-7, "kv_s_per_token"), ("attention.decode_work_s", ".inf", "decode_work_s"),
    ("measured_range.tokens", [1000, 1], "tokens"), ("measured_range.max_batch", 0, "max_batch"),
    ("format", "specplan-profile/9", "format"), ("provenance.kind", "guessed", "kind"), ("tp", 0, "tp"),
    ("attention", DELETE, "attention"), ("token_time", DELETE, "token_time"), ("surprise", 1, "surprise"),
    ("dtype", "int4", "dtype"),
]


def _profile_text(dotted: str, value) -> str:
    text = yaml.safe_dump(_merge(GOOD_PROFILE, dotted, value) if dotted in GOOD_PROFILE or "." in dotted or
                          value is DELETE else {**GOOD_PROFILE, dotted: value})
    return text.replace("'.nan'", ".nan").replace("'.inf'", ".inf")


for dotted, value, needle in BAD_PROFILES:
    files = {"p.yaml": _profile_text(dotted, value)}
    tag = f"{dotted}={value if value is not DELETE else 'missing'}"
    case(f"profile-{tag}-show", ["profile", "show", "{root}/p.yaml"], needle, files)
    case(f"profile-{tag}-simulate", ["simulate", "--set", "cost.model=profile", "--set", "cost.profile={root}/p.yaml",
                                     "--set", "acceptance.mode=alpha"], needle, files)
case("profile-dup-key", ["profile", "show", "{root}/p.yaml"], "tp",
     {"p.yaml": yaml.safe_dump(GOOD_PROFILE) + "tp: 2\n"})
case("profile-not-yaml", ["profile", "show", "{root}/p.yaml"], "p.yaml", {"p.yaml": "format: [\n"})
case("profile-not-utf8", ["profile", "show", "{root}/p.yaml"], "UTF-8", {"p.yaml": b"format: x\n\xff\n"})
case("draft-costs-not-utf8", ["simulate", "--set", "cost.draft_costs={root}/d.yaml"], "UTF-8",
     {"d.yaml": b"sa: \xff\n"})
case("draft-costs-missing", ["simulate", "--set", "cost.draft_costs={root}/nosuch.yaml"], "nosuch.yaml")
case("linear-fit-csv-directory", ["simulate", "--set", "cost.model=linear", "--set", "cost.linear_fit_csv={root}/adir"],
     "adir")
case("linear-fit-csv-columns", ["simulate", "--set", "cost.model=linear", "--set", "cost.linear_fit_csv={root}/m.csv"],
     "kind", {"m.csv": "a,b\n1,2\n"})
case("profile-unknown-name", ["profile", "show", "h999/llama-9"], "h999")
case("profile-plot-unknown-name", ["profile", "plot", "h999/llama-9", "--out", "{root}/p.png"], "h999")

# Sweeps.
BAD_SWEEPS = {
    "unknown-key": ("grid: {speculation.max_draft_len: [1]}\naxes: 1\n", "axes"),
    "axis-not-list": ("grid: {speculation.max_draft_len: 4}\n", "max_draft_len"),
    "axis-empty": ("grid: {speculation.max_draft_len: []}\n", "max_draft_len"),
    "axis-unknown-field": ("grid: {speculation.max_draft_lenn: [1, 2]}\n", "max_draft_lenn"),
    "axis-under-scalar": ("grid: {seed.x: [1]}\n", "seed"),
    "seed-axis": ("grid: {seed: [1, 2]}\n", "seed"),
    "zip-unequal": ("zip: {workload.rate: [1, 2], workload.concurrency: [1]}\n", "zip"),
    "grid-and-zip": ("grid: {workload.rate: [1]}\nzip: {workload.rate: [2]}\n", "workload.rate"),
    "seeds-not-list": ("seeds: 3\n", "seeds"),
    "seeds-dup": ("seeds: [1, 1]\n", "seeds"),
    "seeds-str": ("seeds: [a]\n", "seeds"),
    "baseline-str": ("baseline: sometimes\n", "baseline"),
    "bad-points": ("grid: {speculation.max_draft_len: [-2, -1]}\n", "max_draft_len"),  # one bad point of several: test_sweep_failures
    "negative-seed": ("seeds: [-1]\n", "seed"),
    "base-missing": ("base: nosuch.yaml\n", "nosuch.yaml"),
    "base-scalar": ("base: 3\n", "base"),
    "dup-key": ("grid: {workload.rate: [1]}\ngrid: {workload.rate: [2]}\n", "grid"),
    "top-list": ("- 1\n", "mapping"),
    "huge": ("grid:\n" + "".join(f"  {f}: {list(range(1, 101))}\n" for f in
                                ("workload.rate", "workload.concurrency", "engine.max_batch_size",
                                 "speculation.max_draft_len", "workload.num_requests")), "--max-points"),
}
for name, (text, needle) in BAD_SWEEPS.items():
    case(f"sweep-{name}", ["sweep", "{root}/" + name + ".yaml", "--out", "{root}/s", "--no-progress"], needle,
         {name + ".yaml": text})
case("sweep-missing", ["sweep", "{root}/nosuch.yaml", "--out", "{root}/s"], "nosuch.yaml")
case("sweep-over-limit", ["sweep", "examples/sweep_k_rate.yaml", "--out", "{root}/s", "--max-points", "2"],
     "--max-points")

# Output paths: a regular file, a path under a file, a device, a place that cannot be written.
DIR_OUTPUTS = [
    ["simulate", "--out", "{out}"],
    ["calibrate", "--model", "tiny", "--device", "cpu", "--out", "{out}"],
    ["sweep", "examples/sweep_k_rate.yaml", "--out", "{out}", "--no-progress"],
    ["recommend", "examples/recommend_known_case.yaml", "--slo-tpot-ms", "10", "--out", "{out}"],
    ["validate", "--profile", "h200/llama-3.1-8b", "--device", "cpu", "--out", "{out}"],
    ["acceptance", "mtbench", "--drafter", "ngram", "--cache-dir", "{out}"],
]
FILE_OUTPUTS = [
    ["workloads", "export", "mtbench", "--out", "{out}"],
    ["profile", "plot", "h200/llama-3.1-8b", "--out", "{out}"],
    ["acceptance", "mtbench", "--drafter", "ngram", "--dump-steps", "{out}"],
]
for argv in DIR_OUTPUTS:
    for label, out in (("regular-file", "{root}/afile"), ("under-file", "{root}/afile/sub"), ("dev-null", "/dev/null"),
                       ("proc", "/proc/specplan-cannot-be-here")):
        option = argv[argv.index("{out}") - 1]
        case(f"out-dir-{argv[0]}-{label}", [a.replace("{out}", out) for a in argv], option)
for argv in FILE_OUTPUTS:
    for label, out in (("directory", "{root}/adir"), ("under-file", "{root}/afile/x.out"), ("dev-null", "/dev/null"),
                       ("proc", "/proc/specplan-cannot-be-here/x")):
        option = argv[argv.index("{out}") - 1]
        case(f"out-file-{argv[0]}-{label}", [a.replace("{out}", out) for a in argv], option)

# Reports.
case("report-missing-dir", ["report", "{root}/nosweep"], "nosweep")
case("report-corrupt-parquet", ["report", "{root}/sw"], "results.parquet",
     {"sw/sweep.yaml": "grid: {speculation.max_draft_len: [1]}\n", "sw/results.parquet": b"PAR1 garbage"})
case("report-empty-parquet", ["report", "{root}/sw"], "results.parquet",
     {"sw/sweep.yaml": "grid: {speculation.max_draft_len: [1]}\n", "sw/results.parquet": b""})
case("report-bad-spec", ["report", "{root}/sw"], "sweep.yaml",
     {"sw/sweep.yaml": "grid: [1]\n", "sw/results.parquet": b"x"})
# validate's own checks (before any device work)
case("validate-bad-device", ["validate", "--profile", "h200/llama-3.1-8b", "--device", "tpu", "--out", "{root}/v"],
     "--device")
case("validate-bad-attention", ["validate", "--profile", "h200/llama-3.1-8b", "--device", "cpu", "--attention", "x",
                                "--out", "{root}/v"], "--attention")
case("validate-unknown-profile", ["validate", "--profile", "h999/x", "--device", "cpu", "--out", "{root}/v"], "h999")

# --- Numbers, sizes and repeated settings (issue 32) ------------------------------------------------
TINY_RUN = ["simulate", "--set", "workload.trace=null", "--set", "workload.num_requests=4", "--set",
            "acceptance.mode=alpha"]
NUMBER_FIELDS = [  # (extra --set items, the bad item, the field named)
    (["cost.model=linear_gamma"], "cost.t_base_s=.nan", "t_base_s"),
    (["cost.model=linear_gamma"], "cost.t_base_s={1: .nan}", "t_base_s"),
    (["cost.model=linear_gamma"], "cost.t_base_s=7200", "t_base_s"),  # an hour's step: ms given as s
    (["cost.model=linear_gamma"], "cost.gamma=.inf", "gamma"),
    (["cost.model=linear_gamma"], "cost.gamma={1: 50}", "gamma"),
    (["cost.model=table"], "cost.table_s={1: {0: .nan}}", "table_s"),
    ([], "engine.kv_num_blocks=1000000000000", "kv_num_blocks"),
    ([], "engine.max_batch_size=4294967296", "max_batch_size"),
    ([], "engine.kv_budget_gb=1e300", "kv_budget_gb"),
    ([], "engine.kv_budget_gb=.inf", "kv_budget_gb"),
    (["acceptance.mode=length_dist"], "acceptance.length_dist=[0.5, 0.5, 0.4]", "length_dist"),
    ([], "acceptance.alpha=.nan", "alpha"),
    ([], "workload.rate=.inf", "rate"),
    (["workload.arrival=gamma"], "workload.cv=1e300", "cv"),
    (["workload.arrival=closed_loop"], "workload.think_time_s=.inf", "think_time_s"),
    ([], "speculation.suffix_max_spec_offset=.nan", "suffix_max_spec_offset"),
    ([], "cost.allreduce_beta_Bps=.inf", "allreduce_beta_Bps"),
    ([], "cost.host_overhead_s=-.inf", "host_overhead_s"),
    ([], "max_sim_time_s=.inf", "max_sim_time_s"),
    ([], "slo_ttft_s=.nan", "slo_ttft_s"),
    ([], "cluster.replicas=1000000000", "cluster.replicas"),  # ~640 TB of replicas
    # conflicting and repeated settings
    (["engine.kv_num_blocks=1000"], "engine.kv_budget_gb=10", "kv_budget_gb"),
    ([], "cluster.tp=[4]", "cluster.tp"),
    (["cluster.replicas=2", "cluster.tp=[4, 4]"], "cost.tp=2", "cost.tp"),
    (["speculation.max_draft_len=3"], "speculation.max_draft_len=5", "max_draft_len"),
    (["engine={max_batch_size: 8}"], "engine.max_batch_size=3", "engine.max_batch_size"),
]
for extra, bad, needle in NUMBER_FIELDS:
    case(f"number-{bad}", [*TINY_RUN, *(a for item in extra for a in ("--set", item)), "--set", bad], needle)
case("number-yaml-nan", ["simulate", "{root}/c.yaml"], "t_base_s",
     {"c.yaml": "cost: {model: linear_gamma, t_base_s: .nan}\nworkload: {trace: null, num_requests: 4}\n"})
case("number-yaml-dup-nested", ["simulate", "{root}/c.yaml"], "rate",
     {"c.yaml": "workload:\n  rate: 1\n  num_requests: 4\n  rate: 2\n"})
CAPACITY = ["capacity", "examples/scenario_small.yaml", "--out", "{root}/cap"]
for opt, bad in (("--rate", "inf"), ("--rate", "nan"), ("--rate", "-1"), ("--slo-ttft-ms", "nan"),
                 ("--slo-ttft-ms", "inf"), ("--slo-tpot-ms", "nan"), ("--slo-tpot-ms", "0"),
                 ("--max-replicas", "0"), ("--max-replicas", "1000000000000")):
    good = {"--rate": "1", "--slo-ttft-ms": "100", "--slo-tpot-ms": "50"}
    argv = [*CAPACITY, *(a for o, v in good.items() if o != opt for a in (o, v)), opt, bad]
    case(f"capacity{opt}={bad}", argv, opt)
RECOMMEND = ["recommend", "examples/recommend_known_case.yaml", "--out", "{root}/rec", "--no-progress"]
for opt, bad in (("--slo-tpot-ms", "nan"), ("--slo-tpot-ms", "inf"), ("--slo-ttft-ms", "nan"), ("--rates", "nan"),
                 ("--rates", "1,inf")):
    argv = [*RECOMMEND, *(["--slo-tpot-ms", "10"] if opt != "--slo-tpot-ms" else []), opt, bad]
    case(f"recommend-number{opt}={bad}", argv, opt)
for opt, bad in (("--suffix-max-spec-factor", "nan"), ("--suffix-max-spec-offset", "inf"),
                 ("--suffix-min-token-prob", "nan")):
    case(f"acceptance{opt}={bad}", ["acceptance", "mtbench", "--drafter", "suffix", opt, bad],
         opt.lstrip("-").replace("-", "_"))

# --- Files read through one checked path: model folders, chat templates, trace times, profiles, images,
# --- validate --engine vllm before vLLM, Ray's start (issue 32) -----------------------------------
# A word-level tokenizer.json the tokenizers library loads: enough for a model folder to render chats.
TOKENIZER_JSON = json.dumps({
    "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "post_processor": None,
    "decoder": None, "pre_tokenizer": {"type": "Whitespace"},
    "added_tokens": [{"id": 1, "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True}],
    "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "</s>": 1, "hi": 2}, "unk_token": "<unk>"}})
CHAT = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hi hi"}]})
FOLDER_RUN = ["simulate", "--set", "workload.trace={root}/c.jsonl", "--set", "workload.tokenizer={root}/m",
              "--set", "workload.num_requests=1", "--set", "acceptance.mode=alpha"]


def _folder(config: str | bytes, **extra) -> dict:
    return {"c.jsonl": CHAT + "\n", "m/tokenizer.json": TOKENIZER_JSON, "m/tokenizer_config.json": config, **extra}


def _template(source: str) -> dict:
    return _folder(json.dumps({"eos_token": "</s>", "chat_template": source}))


case("folder-config-not-utf8", FOLDER_RUN, "UTF-8", _folder(b'{"eos_token": "\xff"}'))
case("folder-config-a-list", FOLDER_RUN, "tokenizer_config.json", _folder("[1, 2]"))
case("folder-jinja-not-utf8", FOLDER_RUN, "chat_template.jinja",
     _folder(json.dumps({"eos_token": "</s>"}), **{"m/chat_template.jinja": b"{{ '\xfe' }}"}))
case("template-division-by-zero", FOLDER_RUN, "ZeroDivisionError", _template("{{ 1 / 0 }}"))
case("template-sandbox-range", FOLDER_RUN, "chat_template", _template("{% for i in range(10**7) %}{% endfor %}"))
case("template-100mb-render", FOLDER_RUN, "chat_template", _template("{{ 'x' * 100000000 }}"))
case("template-100mb-streamed", FOLDER_RUN, "chat_template",
     _template("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"))
case("template-nested-ranges", FOLDER_RUN, "chat_template",
     _template("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"))
case("template-ljust", FOLDER_RUN, "chat_template", _template("{{ 'x'.ljust(10**10) }}"))
case("template-center", FOLDER_RUN, "chat_template", _template("{{ 'x' | center(10**10) }}"))
case("template-power", FOLDER_RUN, "chat_template", _template("{{ 7 ** (10 ** 10) }}"))
case("template-recursion", FOLDER_RUN, "chat_template",
     _template("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"))
ARRIVAL_RUN = ["simulate", "--set", "workload.trace={root}/t.jsonl", "--set", "workload.arrival=trace",
               "--set", "workload.num_requests=1", "--set", "acceptance.mode=alpha"]
for bad in ("NaN", "Infinity", "1e300", "-1"):
    case(f"trace-arrival-{bad}", ARRIVAL_RUN, "arrival_s",
         {"t.jsonl": TOK[:-1] + f', "arrival_s": {bad}}}\n'})
MOONCAKE = '{{"timestamp": {t}, "input_length": 3, "output_length": 2, "hash_ids": [1]}}\n'
for bad in ("NaN", "-Infinity", "1e400"):
    case(f"mooncake-timestamp-{bad}", ["workloads", "show", "{root}/m.jsonl", "--format", "mooncake"], "timestamp",
         {"m.jsonl": MOONCAKE.format(t=bad)})
case("mooncake-span-1e300", ["workloads", "show", "{root}/m.jsonl", "--format", "mooncake"], "mooncake-2",
     {"m.jsonl": MOONCAKE.format(t=0) + MOONCAKE.format(t="1e300")})
for dotted, value, needle in (("eager_overhead_s", ".nan", "eager_overhead_s"),
                              ("provenance.heldout_median_abs_error", -0.1, "heldout_median_abs_error"),
                              ("provenance.heldout_median_abs_error", ".inf", "heldout_median_abs_error")):
    case(f"profile-{dotted}={value}-show", ["profile", "show", "{root}/p.yaml"], needle,
         {"p.yaml": _profile_text(dotted, value)})
case("tokenizer-gz-not-gzip", ["workloads", "show", "{root}/c.jsonl", "--format", "chat", "--tokenizer",
                               "{root}/t.model.gz"], "t.model.gz", {"c.jsonl": CHAT + "\n", "t.model.gz": b"garbage"})
case("tokenizer-gz-cut-short", ["workloads", "show", "{root}/c.jsonl", "--format", "chat", "--tokenizer",
                                "{root}/t.model.gz"], "t.model.gz",
     {"c.jsonl": CHAT + "\n", "t.model.gz": gzip.compress(b"x" * 1000)[:20]})
case("profile-heldout_points=-3-show", ["profile", "show", "{root}/p.yaml"], "heldout_points",
     {"p.yaml": _profile_text("provenance.heldout_points", -3)})
case("profile-plot-unknown-image-type", ["profile", "plot", "h200/llama-3.1-8b", "--out", "{root}/x.xyz"], ".xyz")
VLLM = ["validate", "--engine", "vllm", "--out", "{root}/v"]
case("vllm-lookup-min-above-max", [*VLLM, "--speculative-config", json.dumps(
    {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2})],
     "prompt_lookup_min")
case("vllm-lookup-zero", [*VLLM, "--speculative-config", json.dumps(
    {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 0})], "prompt_lookup_max")
case("vllm-missing-model-folder", [*VLLM, "--model", "{root}/no-such-model"], "no-such-model")
case("vllm-folder-without-config", [*VLLM, "--model", "{root}/adir"], "config.json")
case("vllm-missing-trace", [*VLLM, "--model", "{root}/m", "--trace", "{root}/nosuch.jsonl"], "nosuch.jsonl",
     {"m/config.json": "{}"})
