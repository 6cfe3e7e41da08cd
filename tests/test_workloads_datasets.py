"""Benchmark datasets and timestamped traces: lengths, arrivals, tokens and the prompt-only rule,
against values written into the fixtures."""

import json

import numpy as np
import pytest
from test_workloads_model_folder import make_folder

from specplan.config import build_config
from specplan.errors import ConfigError, TraceError
from specplan.workloads.datasets import load_vllm_sonnet
from specplan.workloads.formats import load_workload, sniff_format
from specplan.workloads.model_folder import ModelFolder
from specplan.workloads.timed import MOONCAKE_BLOCK, block_tokens


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_trtllm_bench_dataset(tmp_path):
    tok = make_folder(tmp_path / "m")
    path = write_lines(tmp_path / "bench.jsonl", [
        {"task_id": 0, "input_ids": [5, 6, 7], "output_tokens": 4},
        {"task_id": 1, "prompt": "Hi there", "output_tokens": 2},
    ])
    assert sniff_format(path) == "trtllm-bench"
    with pytest.raises(ConfigError, match="tokenizer.json"):
        load_workload(path)
    folder = ModelFolder(tmp_path / "m")
    a, b = load_workload(path, tokenizer=folder.tokenizer, template=folder.template)
    assert a.id == "task-0" and a.prompt_ids.tolist() == [5, 6, 7] and a.output_len == 4 and a.meta["prompt_only"]
    # trtllm-bench calls tokenizer(prompt): the tokenizer's own post-processing, no chat template
    assert b.prompt_ids.tolist() == tok.encode("Hi there").ids and b.output_len == 2


def test_vllm_sharegpt_takes_the_first_two_turns(tmp_path):
    tok = make_folder(tmp_path / "m")
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([
        {"id": "x", "conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Fine thanks."},
                                      {"from": "human", "value": "And you?"}, {"from": "gpt", "value": "Fine."}]},
        {"id": "short", "conversations": [{"from": "human", "value": "alone"}]},
    ]))
    folder = ModelFolder(tmp_path / "m")
    (req,) = load_workload(path, format="vllm-sharegpt", tokenizer=folder.tokenizer, template=folder.template)
    enc = lambda t: tok.encode(t, add_special_tokens=False).ids
    assert req.prompt_ids.tolist() == folder.encode_chat([("user", "Hi there")])
    assert req.output_ids.tolist() == enc("Fine thanks.") + [1]  # answer + eos <|im_end|>
    assert "prompt_only" not in req.meta


def test_vllm_custom_prompt_only(tmp_path):
    make_folder(tmp_path / "m")
    path = write_lines(tmp_path / "c.jsonl", [{"prompt": "Hi there"}, {"prompt": "And you?", "output_tokens": 9}])
    folder = ModelFolder(tmp_path / "m")
    a, b = load_workload(path, format="vllm-custom", tokenizer=folder.tokenizer, template=folder.template)
    assert (a.output_len, b.output_len) == (256, 9)  # vLLM's --custom-output-len default
    assert a.prompt_ids.tolist() == folder.encode_chat([("user", "Hi there")])


def test_azure_trace_arrivals(tmp_path):
    path = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.6805900,374,44\n"
                    "2023-11-16 18:15:50.9951690,396,109\n"
                    "2023-11-16 18:16:01.0000000,879,20\n")
    assert sniff_format(path) == "azure"
    reqs = load_workload(path)
    # 46.68059 -> 50.995169 -> 61.0 seconds past 18:15
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 4.314579, 14.31941])
    assert [(r.prompt_len, r.output_len) for r in reqs] == [(374, 44), (396, 109), (879, 20)]
    # The trace has no content: no two requests' placeholder prompts share a first KV block (a prompt of
    # zeros each would make every request a prefix-cache hit on every other).
    assert len({tuple(r.prompt_ids[:16]) for r in reqs}) == len(reqs)
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16,3,4\n")
    with pytest.raises(TraceError, match=r"bad\.csv:2: TIMESTAMP"):
        load_workload(bad)


def test_mooncake_blocks_share_prefixes(tmp_path):
    path = write_lines(tmp_path / "mooncake_trace.jsonl", [
        {"timestamp": 0, "input_length": 700, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 2500, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]},
    ])
    a, b = load_workload(path)
    assert (a.arrival_s, b.arrival_s) == (0.0, 2.5)
    assert (a.prompt_len, b.prompt_len, a.output_len, b.output_len) == (700, 600, 10, 5)
    assert np.array_equal(a.prompt_ids[:MOONCAKE_BLOCK], b.prompt_ids[:MOONCAKE_BLOCK])  # block 0 shared
    assert np.array_equal(a.prompt_ids[MOONCAKE_BLOCK:], block_tokens(1)[:700 - MOONCAKE_BLOCK])
    assert not np.array_equal(a.prompt_ids[MOONCAKE_BLOCK:600], b.prompt_ids[MOONCAKE_BLOCK:600])
    write_lines(path, [{"timestamp": 0, "input_length": 700, "output_length": 1, "hash_ids": [0]}])
    with pytest.raises(TraceError, match="has 1 blocks for 700 tokens"):
        load_workload(path)


def test_prompt_only_needs_a_parametric_acceptance(tmp_path):
    from specplan.simulator.run import simulate

    path = write_lines(tmp_path / "m.jsonl", [
        {"timestamp": 1000 * i, "input_length": 100, "output_length": 20, "hash_ids": [i]} for i in range(4)])
    base = {"workload": {"trace": str(path), "arrival": "trace", "num_requests": 4},
            "cost": {"model": "linear_gamma"}}
    with pytest.raises(ConfigError, match="acceptance.mode: prompt-only data"):
        simulate(build_config(base))
    r = simulate(build_config({**base, "acceptance": {"mode": "alpha", "alpha": 0.5}}))
    assert r.summary["completed_requests"] == 4 and r.summary["output_tokens"] == 80
    assert r.requests["arrival_s"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_scenario_names_format_and_folder(tmp_path):
    from specplan.config import WorkloadConfig
    from specplan.workloads.traffic import build_requests

    make_folder(tmp_path / "m")
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"id": f"s{i}", "conversations": [{"from": "human", "value": "Hi there"},
                                                                   {"from": "gpt", "value": "Fine thanks."},
                                                                   {"from": "human", "value": "And you?"},
                                                                   {"from": "gpt", "value": "Fine."}]} for i in range(2)]))
    cfg = WorkloadConfig(trace=str(path), format="vllm-sharegpt", tokenizer=str(tmp_path / "m"), num_requests=2)
    reqs = build_requests(cfg, seed=0)
    assert sorted(r.id for r in reqs) == ["s0", "s1"]  # one request per conversation: turns 0 and 1 only
    # the chat loader (sniffed) keeps every turn: two requests per conversation
    assert len(load_workload(path, tokenizer=str(tmp_path / "m"))) == 4


def test_vllm_sonnet_draws_lines_as_vllm_bench(tmp_path):
    import random

    tok = make_folder(tmp_path / "m")
    lines = [f"Fine thanks line {i}.\n" for i in range(12)]
    path = tmp_path / "sonnet.txt"
    path.write_text("".join(lines))
    folder = ModelFolder(tmp_path / "m")

    def count(text):  # vLLM counts tokenizer(text).input_ids
        return len(tok.encode(text).ids)

    base_text = folder.render([("user", "Pick as many lines as you can from these poem lines:\n")])
    avg = sum(count(line) for line in lines) / len(lines)
    input_len, prefix_len = count(base_text) + round(6 * avg), count(base_text) + round(2 * avg)
    reqs = load_vllm_sonnet(path, tokenizer=folder.tokenizer, template=folder.template, input_len=input_len,
                            prefix_len=prefix_len, num_requests=5, output_len=7)
    assert len(reqs) == 5 and all(r.output_len == 7 and r.meta["prompt_only"] for r in reqs)
    rng = random.Random(0)  # vllm bench --seed 0: random.seed(0), then random.choices per draw
    kept = []
    while len(kept) < 5:  # 6 lines: the first 2 shared, 4 drawn; longer prompts dropped
        text = folder.render([("user", "Pick as many lines as you can from these poem lines:\n"
                                       + "".join(lines[:2] + rng.choices(lines, k=4)))])
        if count(text) <= input_len:
            kept.append(text)
    assert [r.prompt_ids.tolist() for r in reqs] == [tok.encode(t, add_special_tokens=False).ids for t in kept]
    assert all(tok.decode(r.prompt_ids.tolist(), skip_special_tokens=False).count("Fine thanks line") == 6 for r in reqs)


def test_openai_requests_prompt_only(tmp_path):
    make_folder(tmp_path / "m")
    path = write_lines(tmp_path / "batch.jsonl", [
        {"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "m", "messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 12}},
        {"custom_id": "q2", "body": {"messages": [{"role": "system", "content": "You are terse."},
                                                  {"role": "user", "content": "And you?"}], "max_completion_tokens": 3}},
    ])
    assert sniff_format(path) == "openai-requests"
    a, b = load_workload(path, tokenizer=str(tmp_path / "m"))
    folder = ModelFolder(tmp_path / "m")
    assert (a.id, a.output_len, b.id, b.output_len) == ("q1", 12, "q2", 3)
    assert a.prompt_ids.tolist() == folder.encode_chat([("user", "Hi there")])
    assert b.prompt_ids.tolist() == folder.encode_chat([("system", "You are terse."), ("user", "And you?")])
    assert a.meta["prompt_only"]
