"""BurstGPT traces, formats named by the user over sniffing, and a bare sonnet text file.

``data/workloads/burstgpt.csv``: its first three rows are the first rows of HPMLL/BurstGPT
``data/BurstGPT_1.csv`` (as quoted in the dataset's documentation); the others are written here to
hold a failure (``Response tokens`` 0), an ``API log`` row and a fractional timestamp. Expected
arrivals and lengths are worked by hand from the rows, or selected by pandas the way vLLM's
``BurstGPTDataset.load_data`` selects them.
"""

import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_workloads_model_folder import make_folder

from specplan.config import WorkloadConfig
from specplan.errors import ConfigError, TraceError
from specplan.workloads import formats
from specplan.workloads.formats import load_workload, sniff_format
from specplan.workloads.traffic import build_requests

DATA = Path(__file__).parent / "data" / "workloads"
BURST = DATA / "burstgpt.csv"
AZURE_ROWS = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:15:46.6805900,374,44\n"
              "2023-11-16 18:15:50.9951690,396,109\n")


def shape(requests):
    return [(r.arrival_s, r.prompt_len, r.output_len) for r in requests]


def test_burstgpt_csv_is_sniffed_by_its_header_not_as_azure():
    assert sniff_format(BURST) == "burstgpt"
    reqs = load_workload(BURST)
    # rows at 5, 45, 118, 131.5, 140 s (the failed row at 120 s is skipped): arrivals from the first kept row
    assert shape(reqs) == [(0.0, 472, 18), (40.0, 1087, 230), (113.0, 417, 276), (126.5, 210, 64), (135.0, 95, 12)]
    assert [r.id for r in reqs] == ["burstgpt-1", "burstgpt-2", "burstgpt-3", "burstgpt-5", "burstgpt-6"]
    assert all(r.meta["prompt_only"] for r in reqs)


def test_burstgpt_filters_by_model_and_log_type():
    assert shape(load_workload(BURST, model="ChatGPT", log_type="conversation")) == [(0.0, 472, 18), (40.0, 1087, 230)]
    assert shape(load_workload(BURST, log_type="API log")) == [(0.0, 210, 64)]  # 120 s failed, 131.5 s kept
    assert shape(load_workload(BURST, model=["ChatGPT", "GPT-4"])) == shape(load_workload(BURST))
    with pytest.raises(ConfigError, match=r"model: 'GPT4' is not in .*ChatGPT, GPT-4"):
        load_workload(BURST, model="GPT4")
    with pytest.raises(ConfigError, match=r"log_type: 'chat' .*conversation, api"):
        load_workload(BURST, log_type="chat")


def test_burstgpt_gpt4_keeps_the_rows_vllm_bench_keeps():
    df = pd.read_csv(BURST)
    kept = df[(df["Model"] == "GPT-4") & (df["Response tokens"] > 0)]  # BurstGPTDataset.load_data's filter
    reqs = load_workload(BURST, model="GPT-4")
    assert [(r.prompt_len, r.output_len) for r in reqs] == list(zip(kept["Request tokens"], kept["Response tokens"]))
    assert [r.arrival_s for r in reqs] == list(kept["Timestamp"] - kept["Timestamp"].iloc[0])


def test_placeholder_prompts_share_no_prefix_block():
    # the trace has no content: no two requests may look like a shared prefix to the KV block cache
    from specplan.simulator.prefix_cache import block_hashes

    hashes = [set(block_hashes(r.prompt_ids, 16)) for r in load_workload(BURST)]
    assert all(len(h) == r.prompt_len // 16 for h, r in zip(hashes, load_workload(BURST)))
    assert all(not (hashes[i] & hashes[j]) for i in range(len(hashes)) for j in range(i))


def test_named_format_wins_over_sniffing(tmp_path, monkeypatch):
    azure_named = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    shutil.copy(BURST, azure_named)
    burst_named = tmp_path / "BurstGPT_1.csv"
    burst_named.write_text(AZURE_ROWS)
    as_text = tmp_path / "en-de.Sys.txt"  # a WMT-looking name holding a BurstGPT table
    shutil.copy(BURST, as_text)

    def never(path):
        raise AssertionError(f"sniffed {path} although a format was named")

    monkeypatch.setattr(formats, "sniff_format", never)
    assert shape(load_workload(azure_named, format="burstgpt")) == shape(load_workload(BURST, format="burstgpt"))
    assert shape(load_workload(as_text, format="burstgpt"))[1] == (40.0, 1087, 230)
    assert shape(load_workload(burst_named, format="azure")) == [(0.0, 374, 44), (pytest.approx(4.314579), 396, 109)]


def test_mismatched_header_names_the_missing_column(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(AZURE_ROWS)
    with pytest.raises(TraceError) as err:
        load_workload(path, format="burstgpt")
    assert str(err.value) == (f"{path}:1: missing column 'Timestamp' of a BurstGPT trace (has TIMESTAMP, ContextTokens, "
                              "GeneratedTokens); give format: azure if this is the Azure trace")
    path.write_text("Timestamp,Model,Request tokens,Total tokens\n5,ChatGPT,472,490\n")
    with pytest.raises(TraceError, match=r"trace\.csv:1: missing column 'Response tokens'"):
        load_workload(path, format="burstgpt")


@pytest.mark.parametrize("row, message", [
    ("abc,ChatGPT,472,18,490,Conversation log", r":2: column 'Timestamp' must be a number of seconds, got 'abc'"),
    ("nan,ChatGPT,472,18,490,Conversation log", r":2: column 'Timestamp' must be a number of seconds, got 'nan'"),
    ("5,ChatGPT,0,18,18,Conversation log", r":2: column 'Request tokens' must be an integer from 1 to 10,000,000 .*, got '0'"),
    ("5,ChatGPT,472,-3,469,Conversation log", r":2: column 'Response tokens' must be an integer from 0 to 10,000,000 .*, got '-3'"),
    ("5,ChatGPT,1000000000000,3,9,Conversation log", r":2: column 'Request tokens' must be an integer from 1 to 10,000,000 .*"),
    ("5,ChatGPT,472", r":2: expected 6 columns, got 3"),
])
def test_malformed_burstgpt_rows_name_line_and_column(tmp_path, row, message):
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + row + "\n")
    with pytest.raises(TraceError, match=message):
        load_workload(path)


def test_only_failures_is_an_error_not_an_empty_run(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,GPT-4,300,0,300,API log\n")
    with pytest.raises(TraceError, match=r"b\.csv: no requests left .*1 failed"):
        load_workload(path)


def test_config_names_format_and_options():
    cfg = WorkloadConfig(trace=str(BURST), format="burstgpt", format_options={"model": "GPT-4"}, arrival="trace",
                         num_requests=2)
    reqs = build_requests(cfg, seed=0)
    assert sorted((r.arrival_s, r.prompt_len) for r in reqs) == [(0.0, 417), (22.0, 95)]
    bad = WorkloadConfig(trace=str(BURST), format_options={"models": "GPT-4"})
    with pytest.raises(ConfigError, match=r"workload.format_options: format burstgpt has no option 'models' "
                                          r"\(options: model, log_type\)"):
        build_requests(bad, seed=0)


def test_bare_sonnet_txt_is_vllm_sonnet_not_wmt(tmp_path):
    assert sniff_format(DATA / "sonnet.txt") == "vllm-sonnet"
    with pytest.raises(ConfigError) as err:
        load_workload(DATA / "sonnet.txt")
    assert "wmt" not in str(err.value).lower() and "src.txt" not in str(err.value)
    assert "vllm-sonnet" in str(err.value) and "workload.tokenizer" in str(err.value)
    tok = make_folder(tmp_path / "m")
    reqs = load_workload(DATA / "sonnet.txt", tokenizer=str(tmp_path / "m"), input_len=600, prefix_len=100,
                         output_len=7, num_requests=3)
    assert len(reqs) == 3 and all(r.output_len == 7 and r.prompt_len <= 600 and r.meta["prompt_only"] for r in reqs)
    text = tok.decode(reqs[0].prompt_ids.tolist(), skip_special_tokens=False)
    assert "Pick as many lines as you can from these poem lines:\nShall I compare thee" in text


def test_txt_without_wmt_structure_is_refused_naming_format(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("just some lines\nof text\n")
    with pytest.raises(TraceError) as err:
        load_workload(notes)
    message = str(err.value)
    assert "\n" not in message and "format" in message and "wmt" in message and "vllm-sonnet" in message
    assert "no such file" not in message
    assert sniff_format(DATA / "wmt" / "en-de.Sys.txt") == "wmt"  # the real WMT layout still sniffs


def test_csv_of_unknown_columns_is_refused_naming_format(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(TraceError, match=r"x\.csv:1: cannot tell the trace format from columns a, b, c; .*format"):
        load_workload(path)


def test_sweep_points_with_other_format_options_load_their_own_rows():
    from specplan.sweeps import runners

    gpt4, chatgpt = (WorkloadConfig(trace=str(BURST), format_options={"model": m}) for m in ("GPT-4", "ChatGPT"))
    assert runners._trace_key(gpt4) != runners._trace_key(chatgpt)
    assert [r.prompt_len for r in runners._load_trace(runners._trace_key(gpt4))] == [417, 95]
    assert [r.prompt_len for r in runners._load_trace(runners._trace_key(chatgpt))] == [472, 1087, 210]
