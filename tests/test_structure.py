"""The house rules a newcomer relies on, checked on the source: subpackages import each other one way
only, and no module is too long to read in one sitting."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specplan"
MAX_LINES = 400


def _unit(module: str) -> str:
    """The subpackage (or top-level module) of ``specplan.x.y``: ``x``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Subpackage -> subpackages it imports, counting imports inside functions too."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in package.rglob("*.py"):
        rel = path.relative_to(package.parent).with_suffix("")
        src = _unit(".".join(rel.parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module]
            else:
                continue
            for name in targets:
                if name.startswith("specplan.") and _unit(name) != src:
                    edges[src].add(_unit(name))
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []


def test_no_import_cycle_between_subpackages():
    found = cycles(import_graph())
    assert not found, f"subpackages importing each other: {found}"


def test_data_flows_one_way():
    edges = import_graph()
    # Workloads produce requests and know nothing of acceptance, the simulator or costs.
    assert not edges["workloads"] & {"acceptance", "simulator", "cost_models", "sweeps", "reports"}
    # The schema is the bottom layer: config reads no other subpackage but errors, its rules (one
    # engine's, across sections, overrides, error lines), strict YAML and the machine's limits.
    assert edges["config"] <= {"errors", "config_rules", "config_cross", "config_errors", "config_overrides",
                               "strict_yaml", "limits"}
    assert not edges["acceptance"] & {"simulator", "sweeps", "reports", "cli"}


@pytest.mark.parametrize("folder", ["specplan", "scripts"])
def test_no_module_over_400_lines(folder):
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules (over {MAX_LINES} lines): {long}"


ENGINE_NAMES = ("update_draft_len", "prepare_draft_requests", "rewind_kv_cache", "should_use_spec_decode",
                "SpeculationGate", "propose_draft_token_ids", "prepare_draft_tokens")


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_each_engine_mechanism_is_defined_once_under_its_engine_name(name):
    """A grep for the engine's name lands on specplan's one implementation of it."""
    defs = [f"{p.relative_to(ROOT)}:{node.lineno}" for p in PACKAGE.rglob("*.py")
            for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name]
    assert len(defs) == 1, f"{name}: defined at {defs}"
