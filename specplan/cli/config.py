"""``specplan config import FILE``: an engine's own config as specplan scenario sections."""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml
from rich.console import Console

from specplan.cli.choices import ConfigFormat

config_app = typer.Typer(help="Engine configs: read a TensorRT-LLM / vLLM config into scenario sections.",
                    no_args_is_help=True)

@config_app.command("import")
def import_(
    file: Path = typer.Argument(..., help="TensorRT-LLM options YAML, vLLM --speculative-config JSON, or a "
                                          "file holding a 'vllm serve ...' / 'trtllm-serve ...' command line as pasted (environment "
                                          "prefixes, mpirun/srun/trtllm-llmapi-launch wrappers, python -m)."),
    fmt: ConfigFormat = typer.Option(ConfigFormat.yaml, "--format", case_sensitive=False,
                                 help="yaml: sections on stdout, report on stderr; json: all."),
) -> None:
    """Print the scenario sections the engine config maps to, what was mapped, what was ignored and why."""
    from specplan.engine_config import import_engine_config

    result = import_engine_config(file)
    if fmt == "json":
        print(json.dumps(result.report(), indent=2))
        return
    err = Console(stderr=True, soft_wrap=True)
    err.print(f"{file}: {result.engine} engine config.")
    for src, target, value in result.mapped:
        err.print(f"  mapped  {src} -> {target} = {value!r}", markup=False, highlight=False)
    for src, why in result.ignored:
        err.print(f"  ignored {src}: {why}", markup=False, highlight=False)
    for section, why in result.kept:
        err.print(f"  kept    {section}: {why}", markup=False, highlight=False)
    print(yaml.safe_dump(result.sections, sort_keys=False), end="")


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
