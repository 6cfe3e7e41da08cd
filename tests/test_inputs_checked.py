"""Inputs read through one checked path (issue 32): what the table of malformed inputs cannot hold.

Ray's failure to start reaches the user as one line with the fix (the sweep prints its plan first, so
the table's "nothing else on stderr" rule does not apply); the chat-template sandbox's limits leave a
real template's render untouched and stop each hostile one within its limit.
"""

from __future__ import annotations

import pytest

from specplan.cli import main
from specplan.errors import ConfigError, read_checked
from specplan.workloads.chat_templates import MAX_RANGE_ITEMS, MAX_RENDER_CHARS, compile_jinja


def test_ray_that_does_not_start_is_one_line_with_the_fix(tmp_path, capsys):
    pytest.importorskip("ray")
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "examples/sweep_k_rate.yaml", "--backend", "ray", "--address", "nonsense:zz",
              "--out", str(tmp_path / "sw")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: --address nonsense:zz: Ray did not connect (ValueError")
    assert "drop --address" in last


def test_limits_sit_exactly_at_their_bounds():
    """A render may produce exactly MAX_RENDER_CHARS characters and loop over exactly MAX_RANGE_ITEMS
    items; one more of either is refused."""
    at_limit = compile_jinja("{{ 'x' * n }}", "w")
    assert len(at_limit(n=MAX_RENDER_CHARS)) == MAX_RENDER_CHARS
    with pytest.raises(ConfigError, match="more than 16777216"):
        at_limit(n=MAX_RENDER_CHARS + 1)
    loops = compile_jinja("{% for c in chunks %}{% for i in range(size) %}{% endfor %}{% endfor %}.", "w")
    assert loops(chunks=range(10), size=MAX_RANGE_ITEMS // 10) == "."
    with pytest.raises(ConfigError, match="range items"):
        loops(chunks=range(11), size=MAX_RANGE_ITEMS // 10)


def test_concatenation_is_checked_before_it_builds():
    """``~`` (Jinja's concat, no binop the sandbox intercepts) doubling a string in a loop: 2 ** 24 characters
    is the limit exactly, one doubling more is refused before the 32 MiB string is built; ordinary
    concatenation renders as Jinja's own."""
    doubling = "{% set ns = namespace(s='x') %}{% for i in range(n) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
    assert compile_jinja(doubling + "{{ ns.s|length }}", "w")(n=24) == str(MAX_RENDER_CHARS)
    with pytest.raises(ConfigError, match="builds more than 16777216"):
        compile_jinja(doubling + "{{ ns.s|length }}", "w")(n=25)
    plain = compile_jinja("{% for m in messages %}{{ m.role ~ ': ' ~ m.content ~ 1 }}|{% endfor %}", "w")
    assert plain(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]) == \
        "user: hi1|assistant: yo1|"


def test_each_render_gets_its_own_range_budget():
    """The loop budget is per render: many renders of a template that loops stay allowed."""
    render = compile_jinja("{% for c in chunks %}{% for i in range(100000) %}{% endfor %}{% endfor %}ok", "w")
    chunks = range(MAX_RANGE_ITEMS // 200000)  # half the budget per render
    assert all(render(chunks=chunks) == "ok" for _ in range(3))


def test_errors_name_the_option_the_file_and_the_exception():
    render = compile_jinja("{{ messages[0]['content'] / 0 }}", "workload.tokenizer: /m")
    with pytest.raises(ConfigError) as info:
        render(messages=[{"content": 3}])
    assert str(info.value) == ("workload.tokenizer: /m: chat_template raised ZeroDivisionError: division by zero; "
                               "fix the template")


def test_read_checked_refuses_size_encoding_and_folders(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 101)
    with pytest.raises(ConfigError, match="101 bytes, more than the 100"):
        read_checked(big, "opt: ", max_bytes=100)
    assert read_checked(big, max_bytes=101) == "x" * 101
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"ab\xffc")
    with pytest.raises(ConfigError, match="not UTF-8 text .* at byte 2"):
        read_checked(bad)
    with pytest.raises(ConfigError, match="not a file"):
        read_checked(tmp_path)


@pytest.mark.parametrize("trace, says", [("''", "workload.trace: empty; give a bundled trace"),
                                         ("/nonexistent/x.jsonl", "workload.trace: /nonexistent/x.jsonl: no bundled trace"),
                                         (".", "workload.trace: .: not a file")])
def test_trace_that_names_nothing_is_refused_before_the_plan(tmp_path, capsys, trace, says):
    """An empty, missing or folder ``workload.trace``: one line naming the field, nothing printed before
    it (it was once refused only when the run loaded the trace, after the scenario's plan)."""
    config = tmp_path / "c.yaml"
    config.write_text(f"workload: {{trace: {trace}, num_requests: 3}}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", str(config)])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == "" and err.splitlines() == [err.strip()]
    assert err.startswith(f"error: {says}")


def test_a_field_name_a_line_cannot_show_is_quoted():
    from specplan.config import build_config

    with pytest.raises(ConfigError) as info:
        build_config({"workload": {"\n": 1}})
    assert str(info.value) == "config: workload.'\\n': unknown field (check the spelling against the documented fields)"


def test_refusal_found_building_the_run_comes_before_the_plan(tmp_path, capsys):
    """A prompt over max_num_tokens without chunked prefill is found when the executor is built; the
    scenario's plan (on stderr with ``--format json``) is printed only after that, so the refusal is alone."""
    config = tmp_path / "c.yaml"
    config.write_text("engine: {max_num_tokens: 1}\nworkload: {trace: null, num_requests: 3, prompt_len: 8, output_len: 4}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", str(config), "--format", "json"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == "" and err.splitlines() == [err.strip()]
    assert err.startswith("error: engine.max_num_tokens: request 0 has a 8-token prompt")
