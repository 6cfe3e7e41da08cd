"""``calibrate --from-logs``: acceptance from vLLM spec-decode counters, a linear cost from
TensorRT-LLM iteration statistics, both against numbers the fixtures were built from."""

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from specplan.config import load_config

ALPHA, K = 0.6, 4


def vllm_metrics(accepted_per_draft: np.ndarray, k: int) -> str:
    """The /metrics text vLLM's SpecDecodingProm would expose after these drafts: a draft that accepts
    a tokens adds 1 to positions 0..a-1 (two engines, to check the sum over label sets)."""
    lines = ["# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.",
             "# TYPE vllm:spec_decode_num_drafts counter"]
    for engine, part in enumerate(np.array_split(accepted_per_draft, 2)):
        lab = f'engine="{engine}",model_name="m"'
        lines += [f"vllm:spec_decode_num_drafts_total{{{lab}}} {len(part)}.0",
                  f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {len(part) * k}.0",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {int(part.sum())}.0"]
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{p}"}} {int((part > p).sum())}.0'
                  for p in range(k)]
    lines += ['vllm:iteration_tokens_total_sum{engine="0"} 5000.0', 'vllm:iteration_tokens_total_count{engine="0"} 100.0']
    return "\n".join(lines) + "\n"


def run(*args):
    return subprocess.run([sys.executable, "-m", "specplan", "calibrate", *args], capture_output=True, text=True)


def test_vllm_per_position_rates_recover_alpha(tmp_path):
    rng = np.random.default_rng(0)
    # i.i.d. acceptance: each position accepted with ALPHA given all before were
    accepted = (rng.random((200_000, K)) < ALPHA).cumprod(axis=1).sum(axis=1)
    log = tmp_path / "metrics.txt"
    log.write_text(vllm_metrics(accepted, K))
    r = run("--from-logs", str(log), "--out", str(tmp_path / "cal"))
    assert r.returncode == 0, r.stderr
    acc = json.loads(r.stdout)["acceptance"]
    assert len(acc["per_position"]) == K
    assert all(abs(x - ALPHA) < 0.01 for x in acc["per_position"])
    closed_form = 1 + sum(ALPHA ** i for i in range(1, K + 1))  # 2.3056
    assert acc["mean_acceptance_length"] == pytest.approx(closed_form, abs=0.01)
    # P(accepted = a) = alpha^a (1 - alpha) for a < K, alpha^K at K
    want = [ALPHA ** a * (1 - ALPHA) for a in range(K)] + [ALPHA ** K]
    assert acc["length_dist"] == pytest.approx(want, abs=0.005)
    assert acc["observed"]["mean_tokens_per_step"] == 50.0
    # the written scenario runs as is
    cfg = load_config(tmp_path / "cal" / "scenario.yaml")
    assert cfg.acceptance.mode == "per_position" and cfg.acceptance.per_position == acc["per_position"]


def test_vllm_counts_by_hand(tmp_path):
    # 10 drafts at K = 3 accepting 0,0,1,1,1,2,3,3,3,3 tokens: positions 0,1,2 counted 8, 5, 4
    log = tmp_path / "m.txt"
    log.write_text(vllm_metrics(np.array([0, 0, 1, 1, 1, 2, 3, 3, 3, 3]), 3))
    acc = json.loads(run("--from-logs", str(log), "--out", str(tmp_path / "o")).stdout)["acceptance"]
    assert acc["per_position"] == pytest.approx([8 / 10, 5 / 8, 4 / 5])
    assert acc["length_dist"] == pytest.approx([0.2, 0.3, 0.1, 0.4])
    assert acc["mean_acceptance_length"] == pytest.approx(1 + 17 / 10)


COEF = {"c0_s": 0.004, "c_tok_s": 2.5e-5, "c_seq_s": 6.0e-5}


def trt_iteration_stats(n: int, seed: int = 0) -> list:
    """Iteration stats as TensorRT-LLM writes them, latency from a known linear cost with 0.5% noise."""
    rng = np.random.default_rng(seed)
    stats = []
    for i in range(n):
        ctx, gen = int(rng.integers(0, 3)), 2 * int(rng.integers(1, 32))  # even: 1.5 accepted per draft exactly
        ctx_tok = int(rng.integers(50, 800)) * ctx
        draft = gen * 4
        tokens, seqs = ctx_tok + gen + draft, ctx + gen
        t = (COEF["c0_s"] + COEF["c_tok_s"] * tokens + COEF["c_seq_s"] * seqs) * (1 + 0.005 * rng.standard_normal())
        rec = {"iter": i, "iterLatencyMS": t * 1e3, "numActiveRequests": seqs,
               "inflightBatchingStats": {"numScheduledRequests": seqs, "numContextRequests": ctx, "numGenRequests": gen,
                                         "numPausedRequests": 0, "numCtxTokens": ctx_tok, "microBatchId": 0},
               "specDecodingStats": {"numDraftTokens": draft, "numAcceptedTokens": gen * 3 // 2,
                                     "numRequestsWithDraftTokens": gen, "acceptanceLength": 2.5,
                                     "iterLatencyMS": 0.1, "draftOverhead": 0.01}}
        stats.append(json.dumps(rec) if i % 2 else rec)  # get_stats() hands out JSON strings in some versions
    return stats


def test_trtllm_iteration_stats_recover_the_linear_cost(tmp_path):
    log = tmp_path / "iteration_stats.json"
    log.write_text(json.dumps(trt_iteration_stats(400)))
    r = run("--from-logs", str(log), "--out", str(tmp_path / "cal"))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["cost"]["linear_coefficients"]
    for name, want in COEF.items():
        assert got[name] == pytest.approx(want, rel=0.02), name
    acc = json.loads((tmp_path / "cal" / "acceptance.json").read_text())
    # per draft: 4 drafted, 1.5 accepted; the i.i.d. alpha solves a + a^2 + a^3 + a^4 = 1.5
    a = acc["per_position"][0]
    assert acc["max_draft_len"] == 4 and a + a ** 2 + a ** 3 + a ** 4 == pytest.approx(1.5, abs=1e-6)
    assert acc["mean_acceptance_length"] == pytest.approx(2.5, abs=0.01)
    scenario = yaml.safe_load((tmp_path / "cal" / "scenario.yaml").read_text())
    assert scenario["cost"]["model"] == "linear" and load_config(tmp_path / "cal" / "scenario.yaml").cost.model == "linear"


@pytest.mark.parametrize("text, word", [("vllm:num_requests_running 3\n", "spec_decode_num_drafts"),
                                        ('[{"iter": 1}]', "iterLatencyMS"), ("hello\n", "neither")])
def test_bad_logs_are_one_line(tmp_path, text, word):
    log = tmp_path / "log.txt"
    log.write_text(text)
    r = run("--from-logs", str(log), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and word in r.stderr and "Traceback" not in r.stderr


def _write_log(tmp_path, text):
    log = tmp_path / "log.txt"
    log.write_text(text)
    return log


def test_label_values_with_braces_and_escaped_quotes_count_every_sample(tmp_path):
    # three label sets; two have label values a hand-rolled regex misreads ('}' inside, escaped quotes)
    labels = ['model_name="plain"', 'model_name="odd}name"', r'model_name="say \"hi\""']
    lines = ["# TYPE vllm:spec_decode_num_drafts counter", "# TYPE vllm:spec_decode_num_draft_tokens counter",
             "# TYPE vllm:spec_decode_num_accepted_tokens counter",
             "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter"]
    for lab in labels:  # each label set: 10 drafts of K = 2, positions accepted 6 and 3 times
        lines += [f"vllm:spec_decode_num_drafts_total{{{lab}}} 10.0",
                  f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} 20.0",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} 9.0",
                  f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="0"}} 6.0',
                  f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="1"}} 3.0']
    r = run("--from-logs", str(_write_log(tmp_path, "\n".join(lines) + "\n")), "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    acc = json.loads(r.stdout)["acceptance"]
    assert acc["num_drafts"] == 30  # all three label sets
    assert acc["per_position"] == pytest.approx([18 / 30, 9 / 18])
    assert acc["mean_acceptance_length"] == pytest.approx(1 + 27 / 30)
    assert acc["mean_draft_length"] == pytest.approx(60 / 30)


def test_a_missing_field_is_one_line_on_the_command_line(tmp_path):
    rec = _trt()
    del rec["specDecodingStats"]["numRequestsWithDraftTokens"]
    r = run("--from-logs", str(_write_log(tmp_path, json.dumps([rec]))), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "numRequestsWithDraftTokens: missing" in r.stderr


def test_vllm_mean_draft_length_counts_short_drafts(tmp_path):
    # 4 drafts proposing 3, 3, 1, 1 tokens (n-gram found fewer): 8 draft tokens, mean 2
    text = ("vllm:spec_decode_num_drafts_total 4\nvllm:spec_decode_num_draft_tokens_total 8\n"
            "vllm:spec_decode_num_accepted_tokens_total 3\n"
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 2\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 1\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 0\n')
    from specplan.calibration.from_logs import calibrate_from_logs

    acc = calibrate_from_logs([_write_log(tmp_path, text)], tmp_path / "o")["acceptance"]
    assert acc["mean_draft_length"] == 2.0 and acc["max_draft_len"] == 3


def _trt(**spec):
    rec = {"iterLatencyMS": 10.0, "inflightBatchingStats": {"numContextRequests": 0, "numGenRequests": 4, "numCtxTokens": 0},
           "specDecodingStats": {"numDraftTokens": 12, "numAcceptedTokens": 6, "numRequestsWithDraftTokens": 4,
                                 "iterLatencyMS": 0.5}}
    rec["specDecodingStats"].update(spec)
    return rec


def test_trtllm_mean_draft_length_and_draft_latency(tmp_path):
    from specplan.calibration.from_logs import calibrate_from_logs

    recs = [_trt(), _trt(numDraftTokens=4, numAcceptedTokens=2, numRequestsWithDraftTokens=2, iterLatencyMS=1.5)]
    acc = calibrate_from_logs([_write_log(tmp_path, json.dumps(recs))], tmp_path / "o")["acceptance"]
    assert acc["mean_draft_length"] == pytest.approx(16 / 6) and acc["mean_draft_latency_ms"] == pytest.approx(1.0)


@pytest.mark.parametrize("text, words", [
    # TensorRT-LLM's documented /metrics sample has no numRequestsWithDraftTokens: named, not read as 0
    (json.dumps([{"iterLatencyMS": 10.0, "inflightBatchingStats": {"numContextRequests": 0, "numGenRequests": 1,
                                                                   "numCtxTokens": 0},
                  "specDecodingStats": {"numDraftTokens": 3, "numAcceptedTokens": 1, "acceptanceLength": 2.0}}]),
     ["specDecodingStats.numRequestsWithDraftTokens", "missing"]),
    (json.dumps([_trt(numAcceptedTokens=13)]), ["numAcceptedTokens 13", "exceeds numDraftTokens 12"]),
    (json.dumps([{**_trt(), "iterLatencyMS": -1.0}]), ["iterLatencyMS", ">= 0", "-1.0"]),
    (json.dumps([_trt(numDraftTokens="12")]), ["specDecodingStats.numDraftTokens", "'12'"]),
    ('[{"iterLatencyMS": NaN, "inflightBatchingStats": {}}]', ["iterLatencyMS", "nan"]),
    ('["not json"]', ["record 0", "IterationStats"]),
    ("vllm:spec_decode_num_drafts_total NaN\nvllm:spec_decode_num_draft_tokens_total 3\n"
     "vllm:spec_decode_num_accepted_tokens_total 1\n", ["vllm:spec_decode_num_drafts_total", "nan"]),
    ("# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total +Inf\n", ["inf"]),
    ("vllm:spec_decode_num_drafts_total 2\nvllm:spec_decode_num_draft_tokens_total 3\n"
     "vllm:spec_decode_num_accepted_tokens_total 5\n", ["accepted_tokens 5", "exceeds", "draft_tokens 3"]),
])
def test_bad_log_fields_are_named(tmp_path, text, words):
    from specplan.calibration.from_logs import calibrate_from_logs
    from specplan.errors import TraceError

    with pytest.raises(TraceError) as err:
        calibrate_from_logs([_write_log(tmp_path, text)], tmp_path / "o")
    message = str(err.value)
    assert "\n" not in message and all(w.lower() in message.lower() for w in words), message
