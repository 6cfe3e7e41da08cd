"""``specplan profile list | show``: bundled names, analytic fallbacks, table output, one-line errors."""

import json

import typer
from typer.testing import CliRunner

from specplan.cli import profile as profile_cli


def invoke(*args):
    root = typer.Typer()
    profile_cli.register(root)
    return CliRunner().invoke(root, ["profile", *args])


def test_list_shows_the_default_profile_and_its_provenance():
    result = invoke("list")
    assert result.exit_code == 0, result.output
    assert "h200/llama-3.1-8b" in result.stdout and "analytic" in result.stdout


def test_show_table_and_analytic_fallback():
    result = invoke("show", "h200/llama-3.1-8b", "--context", "4096")
    assert result.exit_code == 0, result.output
    assert "γ K=8" in result.stdout and "bundled h200/llama-3.1-8b" in result.stdout
    view = json.loads(invoke("show", "b200/qwen2.5-7b", "--format", "json").stdout)
    assert view["profile"] == "b200/qwen2.5-7b" and view["context"] == 1024
    assert view["gamma"]["4"][0] < view["gamma"]["4"][255]  # gamma rises from B=1 to B=256


def test_unknown_profile_is_one_line():
    result = invoke("show", "tpu/llama-3.1-8b")
    assert result.exit_code != 0
    assert "profile 'tpu/llama-3.1-8b'" in str(result.exception) and "\n" not in str(result.exception)
