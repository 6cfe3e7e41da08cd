"""Property tests over the config schema and the trace loaders: any generated document is either
accepted (and, through the CLI, simulates) or refused in one line with exit 2; never a traceback,
never a hang.

Documents are a tiny valid scenario (three synthetic requests) with fields of the pydantic schema
replaced by hostile values: NaN and infinities, huge and negative numbers, wrong types, lists where
sections go, unknown keys. Fields that size the work (request counts and lengths, clients,
replicas) take only small values or values past their limits, so an accepted case stays tiny. Each
case runs under an alarm (``HANG_S``) that detects a hang, not slowness; hypothesis' own deadline is
off and examples are derandomized, so nothing here depends on CPU speed or luck.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import tempfile
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from specplan.cli import main
from specplan.config import SimConfig, build_config
from specplan.errors import SpecplanError
from specplan.workloads import load_workload

HANG_S = 60  # generous on a loaded machine: a case that runs this long is stuck
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

BASE = {
    "engine": {"max_batch_size": 4, "kv_num_blocks": 2000},
    "speculation": {"decoding_type": "NGram", "max_draft_len": 2, "max_matching_ngram_size": 2},
    "acceptance": {"mode": "alpha", "alpha": 0.6},
    "workload": {"trace": None, "arrival": "poisson", "rate": 50.0, "num_requests": 3, "prompt_len": 8,
                 "output_len": 4},
    "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.1},
}
# Fields whose valid values scale the work of a run; they get small values or ones past their limits.
SIZE_FIELDS = {"num_requests", "prompt_len", "output_len", "concurrency", "replicas", "tp", "max_draft_len",
               "suffix_max_tree_depth", "max_matching_ngram_size", "prompt_lookup_min", "prompt_lookup_max"}


@contextlib.contextmanager
def hang_alarm():
    def expire(signum, frame):
        raise TimeoutError(f"no answer within {HANG_S} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _schema_fields(model: type[BaseModel], prefix: tuple = ()) -> list[tuple[tuple, object]]:
    """Every (path, annotation) of the config schema, nested sections included."""
    out = []
    for name, info in model.model_fields.items():
        path = (*prefix, name)
        out.append((path, info.annotation))
        inner = [a for a in (info.annotation, *typing.get_args(info.annotation)) if isinstance(a, type)
                 and issubclass(a, BaseModel)]
        for sub in inner:
            out.extend(_schema_fields(sub, path))
    return out


FIELDS = _schema_fields(SimConfig)
SMALL_INTS = st.integers(-3, 8)
HUGE_NUMBERS = st.sampled_from([10**12, 2**63, -(2**63), 10**30, 1e300, -1e300, 1e-300, 5e-324])
FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)
SCALARS = st.one_of(st.none(), st.booleans(), SMALL_INTS, HUGE_NUMBERS, FLOATS, st.text(max_size=6),
                    st.sampled_from([".nan", "inf", "-1", "1e12", "NGram", "alpha", "vllm", "closed_loop"]))
HOSTILE = st.one_of(SCALARS, st.lists(SCALARS, max_size=4), st.dictionaries(SMALL_INTS, SCALARS, max_size=3),
                    st.lists(st.lists(SMALL_INTS, max_size=5), max_size=3))
SIZE_VALUES = st.one_of(st.integers(-2, 6), st.sampled_from([10**12, 2**63, 1e300, float("nan"), float("inf"),
                                                             "many", None, [3], {"a": 1}]))


def _choices(annotation) -> list:
    """The values of a Literal field (possibly Optional / Annotated)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return list(args)
    return [v for a in args for v in _choices(a)]


def _types(annotation) -> set:
    """The plain types a field takes (``Optional[float]`` -> {float, NoneType})."""
    if isinstance(annotation, type):
        return {annotation}
    return {t for a in typing.get_args(annotation) for t in _types(a)}


def _plausible(annotation):
    """Values of the field's own type and a plausible size: most of them pass, so runs happen."""
    choices, types = _choices(annotation), _types(annotation)
    if choices:
        return st.sampled_from(choices)
    if bool in types:
        return st.booleans()
    if int in types:
        return st.integers(0, 8)
    if float in types:
        return st.floats(0, 1)
    return HOSTILE


@st.composite
def documents(draw) -> dict:
    doc = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(1, 3))):
        path, annotation = draw(st.sampled_from(FIELDS))
        if path[-1] in SIZE_FIELDS:
            value = draw(SIZE_VALUES)
        elif draw(st.integers(0, 2)):
            value = draw(_plausible(annotation))
        else:
            value = draw(HOSTILE)
        node = doc
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[path[-1]] = value
    shape = draw(st.sampled_from(["as is"] * 6 + ["unknown key", "list section", "scalar section"]))
    if shape == "unknown key":
        section = draw(st.sampled_from([None, *BASE]))
        target = doc if section is None else doc.get(section)
        if not isinstance(target, dict):  # a field drawn above may have set the section itself to a scalar
            target = doc[section] = {}
        target[draw(st.text(min_size=1, max_size=8))] = 1
    elif shape != "as is":
        doc[draw(st.sampled_from(list(BASE)))] = [1, 2] if shape == "list section" else 3
    return doc


def _one_line_refusal(message: str) -> None:
    assert "\n" not in message.strip() and "Traceback" not in message, message


@PROPERTY
@given(documents())
def test_schema_accepts_or_refuses_in_one_line(doc):
    """build_config: a SimConfig, or one ConfigError line; no other exception escapes a validator."""
    with hang_alarm():
        try:
            build_config(doc)
        except SpecplanError as exc:
            _one_line_refusal(str(exc))


def _run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``specplan ARGV`` in-process: exit code, stderr, stdout."""
    err, out = io.StringIO(), io.StringIO()
    code = 0
    with hang_alarm(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code or 0
    return code, err.getvalue(), out.getvalue()


# Refusals only a run can find (no request completed in the simulated time it was given): they follow
# the scenario's plan, which ``--format json`` prints on stderr; every other refusal comes alone.
AFTER_RUN = ("error: max_sim_time_s: ",)


def _check_exit(code: int, err: str) -> None:
    if code == 0:
        return
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"exit {code}: {err!r}"
    assert lines and lines[-1].startswith("error: "), err
    if lines[-1].startswith(AFTER_RUN):
        assert not any(line.startswith("error: ") or "Traceback" in line for line in lines[:-1]), err
    else:
        assert len(lines) == 1, err


@settings(PROPERTY, max_examples=120)
@given(documents())
def test_simulate_runs_or_refuses_in_one_line(doc):
    """The YAML through ``specplan simulate``: exit 0 with a summary, or exit 2 with one ``error:`` line."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
        code, err, out = _run_cli(["simulate", str(path), "--format", "json"])
    _check_exit(code, err)
    if code == 0:  # it simulated: every request of the scenario accounted for
        summary = json.loads(out)
        assert 0 <= summary["completed_requests"] <= build_config(doc).workload.num_requests


def test_the_generator_reaches_both_outcomes():
    """The documents are neither all refused nor all accepted: a property that held only by refusing
    everything would test nothing."""
    outcomes = set()

    @settings(PROPERTY, max_examples=60)
    @given(documents())
    def collect(doc):
        try:
            build_config(doc)
            outcomes.add("accepted")
        except SpecplanError:
            outcomes.add("refused")

    collect()
    assert outcomes == {"accepted", "refused"}


# --- Trace loaders: generated garbage in the formats they read ---------------------------------------

JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 40), HUGE_NUMBERS.filter(lambda v: abs(v) < 1e300),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                        st.lists(st.integers(-3, 300), max_size=6))
FORMAT_KEYS = {
    "tokens": ["id", "prompt_ids", "output_ids", "arrival_s", "turn"],
    "chat": ["id", "messages", "conversations"],
    "prompt-response": ["id", "prompt", "response"],
    "vllm-custom": ["prompt", "output_tokens"],
    "trtllm-bench": ["task_id", "input_ids", "output_tokens"],
}
HUGE_LENGTHS = (10**12, 2**40)  # a length that would allocate terabytes must be refused, not allocated


@st.composite
def jsonl_traces(draw) -> tuple[str, str]:
    fmt = draw(st.sampled_from(sorted(FORMAT_KEYS)))
    keys = FORMAT_KEYS[fmt]
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["record"] * 4 + ["garbage", "array", "blank"]))
        if kind == "record":
            rec = {k: draw(JSON_VALUES) for k in draw(st.lists(st.sampled_from(keys), unique=True, min_size=1))}
            if "messages" in rec and draw(st.booleans()):
                rec["messages"] = [{"role": draw(st.sampled_from(["user", "assistant", "x", 3])),
                                    "content": draw(JSON_VALUES)} for _ in range(draw(st.integers(0, 3)))]
            lines.append(json.dumps(rec))
        elif kind == "garbage":
            lines.append(draw(st.text(max_size=12)))
        else:
            lines.append("[1, 2]" if kind == "array" else "")
    return fmt, "\n".join(lines) + "\n"


AZURE_CELLS = st.one_of(st.sampled_from(["2023-11-16 18:15:46.6805900", "2023-11-16 18:15:47", "yesterday", "",
                                         "nan", "inf", "-1", "1e12", str(10**12), "12", "0"]),
                        st.integers(-5, 300).map(str))


@st.composite
def azure_traces(draw) -> str:
    header = draw(st.sampled_from(["TIMESTAMP,ContextTokens,GeneratedTokens", "a,b", ""]))
    rows = [",".join(draw(st.lists(AZURE_CELLS, min_size=0, max_size=4))) for _ in range(draw(st.integers(0, 4)))]
    return "\n".join([header, *rows]) + "\n"


def _load_or_refuse(path: Path, fmt: str | None) -> None:
    with hang_alarm():
        try:
            requests = load_workload(path, format=fmt)
        except SpecplanError as exc:
            _one_line_refusal(str(exc))
            return
    assert all(r.prompt_len >= 0 for r in requests)


@PROPERTY
@given(jsonl_traces(), st.booleans())
def test_jsonl_loaders_load_or_refuse_in_one_line(trace, named):
    fmt, text = trace
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        path.write_text(text, encoding="utf-8")
        _load_or_refuse(path, fmt if named else None)


@PROPERTY
@given(azure_traces())
def test_azure_csv_loader_loads_or_refuses_in_one_line(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        path.write_text(text, encoding="utf-8")
        _load_or_refuse(path, "azure")


@settings(PROPERTY, max_examples=40)
@given(jsonl_traces())
def test_workloads_show_exits_0_or_2_with_one_line(trace):
    fmt, text = trace
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        path.write_text(text, encoding="utf-8")
        code, err, _ = _run_cli(["workloads", "show", str(path), "--format", fmt])
    _check_exit(code, err)


@pytest.mark.parametrize("length", HUGE_LENGTHS)
@pytest.mark.parametrize("fmt, name, text, field", [
    ("azure", "trace.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,{n},10\n",
     "ContextTokens"),
    ("azure", "trace.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,{n}\n",
     "GeneratedTokens"),
    ("trtllm-bench", "trace.jsonl", '{{"task_id": 0, "input_ids": [1, 2], "output_tokens": {n}}}\n', "output_tokens"),
])
def test_huge_lengths_in_a_trace_are_refused_not_allocated(tmp_path, length, fmt, name, text, field):
    """A row claiming 10^12 tokens must not allocate them (4 TB of token ids): one line naming the field."""
    path = tmp_path / name
    path.write_text(text.format(n=length))
    with hang_alarm(), pytest.raises(SpecplanError) as info:
        load_workload(path, format=fmt)
    _one_line_refusal(str(info.value))
    assert f"field '{field}'" in str(info.value) and "10,000,000" in str(info.value)

