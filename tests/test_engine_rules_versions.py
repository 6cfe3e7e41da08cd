"""``engine.version``: the rules that changed between engine releases, from one table
(``specplan.simulator.paths.VERSIONS``), and ``config import`` reading the release a pasted line names."""

import pytest

from specplan.errors import ConfigError
from specplan.simulator.paths import VERSIONS, dynamic_draft_len


def test_sa_follows_its_schedule_only_where_support_dynamic_draft_len_has_it(make_config):
    # SpeculativeDecodingMode.support_dynamic_draft_len: Eagle3 one-model only in the older interface.py
    # (release 1.2 here), SA among them in the latest. SA, K 4, draft_len_schedule {2: 4, 8: 1} (keys
    # are upper bounds on the one-model path), 4 clients: with 4 scheduled rows the latest rules verify
    # K = 1 (1 + 1 per generation row); 1.2 keeps K = 4.
    from specplan.simulator.run import simulate

    common = dict(speculation={"decoding_type": "SA", "max_draft_len": 4, "draft_len_schedule": {2: 4, 8: 1}},
                  workload={"concurrency": 4, "num_requests": 4, "output_len": 30})
    latest = simulate(make_config(**common)).iterations
    old = simulate(make_config(engine={"version": "1.2"}, **common)).iterations
    full = lambda it: it[(it["gen_rows"] == 4) & it["spec_on"]]  # noqa: E731
    assert len(full(latest)) and (full(latest)["k"] == 1).all()
    assert (full(latest)["verified_draft_tokens"] == 4).all()
    assert len(full(old)) and (full(old)["k"] == 4).all()
    assert (full(old)["verified_draft_tokens"] == 16).all()


def test_the_table_and_unknown_releases():
    assert dynamic_draft_len("trtllm", "latest", "SA") and not dynamic_draft_len("trtllm", "1.2", "SA")
    assert dynamic_draft_len("trtllm", "1.2", "Eagle3")
    assert set(VERSIONS["vllm"]) == {"latest", "0.32"}
    with pytest.raises(ConfigError, match="engine.version"):
        dynamic_draft_len("trtllm", "0.9", "SA")


@pytest.mark.parametrize("text,engine,version", [
    ("pip install vllm==0.32.0\nvllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 32\n", "vllm", "0.32"),
    ("pip install tensorrt_llm==1.2.0\ntrtllm-serve meta-llama/Llama-3.1-8B-Instruct --max_batch_size 16\n",
     "trtllm", "1.2"),
    ("pip install vllm==0.11.0\nvllm serve meta-llama/Llama-3.1-8B-Instruct\n", "vllm", None),
])
def test_config_import_reads_the_release(tmp_path, text, engine, version):
    from specplan.engine_config.importer import import_engine_config

    path = tmp_path / "serve.sh"
    path.write_text(text)
    result = import_engine_config(path)
    assert result.sections["engine"]["engine"] == engine
    assert result.sections["engine"].get("version") == version
    if version is None:  # a release with no rules of its own is reported, and the latest apply
        assert any("0.11" in why for _, why in result.ignored)
