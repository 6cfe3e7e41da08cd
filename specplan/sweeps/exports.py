"""The recommendation as the files an operator pastes, each simulated exactly as written.

``recommend`` searches with specplan settings, but what an operator runs is the exported file:
TensorRT-LLM's ``speculative_config`` YAML and vLLM's ``--speculative-config`` JSON, with the schedule
rewritten in each path's keys, the gate, and, where an engine lacks the drafter, its closest one
(``export.SUBSTITUTES``). Every figure ``recommend`` quotes for a file is therefore that file run
through ``--engine-config`` over the scenario (``load(path)``, what ``specplan simulate
--engine-config FILE`` does) at each confirmation traffic, next to the same engine without
speculation. When no speculation wins, the simulated engine's plain config is written instead (an
options YAML without ``speculative_config``, or a ``vllm serve`` line without
``--speculative-config``), and its figures are the baseline's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from specplan.config import SimConfig
from specplan.engine_config import export
from specplan.errors import SpecplanError
from specplan.simulator.run import baseline_config
from specplan.sweeps.records import RecordStore, config_key
from specplan.sweeps.runners import Runner, execute

TRTLLM_FILE = "trtllm_speculative_config.yaml"
VLLM_FILE = "vllm_speculative_config.json"
VLLM_SERVE_FILE = "vllm_serve.sh"
ALL_FILES = (TRTLLM_FILE, VLLM_FILE, VLLM_SERVE_FILE)


@dataclass
class Export:
    """One written file: which engine runs it, what it substitutes, and its simulated figures."""

    engine: str
    path: Path
    speculates: bool
    note: Optional[str] = None  # the substitute drafter, when the engine lacks the recommended one
    results: list[dict] = field(default_factory=list)  # per confirmation traffic: the file's summary
    baseline: list[dict] = field(default_factory=list)  # per confirmation traffic: the engine without speculation
    error: Optional[str] = None  # why the file could not be simulated (it was still written)

    def goodput(self, which: str = "results") -> float:
        return sum(s["goodput_tok_s"] for s in getattr(self, which))

    @property
    def gain(self) -> Optional[float]:
        """Goodput of the file over its engine's without speculation, minus one."""
        base = self.goodput("baseline")
        return self.goodput() / base - 1.0 if base > 0 else None


def write_exports(rec, cfg: SimConfig, out: Path) -> list[Export]:
    """Write the engine files for a recommendation (``sweeps.recommend.Recommendation``) of ``cfg``'s
    search; the simulated engine's file first. Files of an earlier run here are removed first."""
    for name in ALL_FILES:
        (out / name).unlink(missing_ok=True)
    simulated = cfg.engine.engine
    if not rec.speculates:
        e = cfg.engine
        why = f"no speculation: no {cfg.speculation.decoding_type} setting beats running without it here"
        if simulated == "trtllm":
            path = export.write_trtllm_options(export.trtllm_plain_options(e.max_batch_size, e.max_num_tokens),
                                               out / TRTLLM_FILE, f"{why}; run without speculative_config")
        else:
            path = export.write_vllm_command(export.vllm_plain_command(e.max_batch_size, e.max_num_tokens),
                                             out / VLLM_SERVE_FILE, f"{why}; run without --speculative-config")
        return [Export(simulated, path, speculates=False)]
    spec = rec.recommended
    keys = dict(keys=rec.keys, max_batch_size=cfg.engine.max_batch_size)  # the path's schedule keys
    files = {
        "trtllm": lambda: export.write_trtllm_yaml(export.trtllm_speculative_config(spec, **keys), out / TRTLLM_FILE,
                                                   comment=export.substitute_note(spec, "trtllm")),
        "vllm": lambda: export.write_vllm_json(export.vllm_speculative_config(spec, **keys), out / VLLM_FILE),
    }
    order = [simulated] + [e for e in files if e != simulated]
    return [Export(engine, files[engine](), speculates=True, note=export.substitute_note(spec, engine))
            for engine in order]


def simulate_exports(exports: Sequence[Export], load: Callable[[Path], SimConfig], workloads: Sequence,
                     slo: dict, runner: Runner, store: RecordStore, progress: bool = False) -> None:
    """Fill each export's figures: the file over the scenario (``load``) at each workload, and the same
    without speculation. A file the scenario cannot take (e.g. a vLLM-only setting under
    TensorRT-LLM) keeps its error instead."""
    runs: dict[tuple[int, str, int], SimConfig] = {}
    for i, exp in enumerate(exports):
        try:
            loaded = load(exp.path)
            for j, w in enumerate(workloads):
                cfg = loaded.model_copy(update={"workload": w, **slo})
                runs[i, "results", j] = SimConfig.model_validate(cfg.model_dump())
                runs[i, "baseline", j] = baseline_config(runs[i, "results", j])
        except SpecplanError as exc:
            exp.error = str(exc)
    recs = execute(runs.values(), runner, store, progress, "recommend: the exported files")
    for (i, which, _), cfg in runs.items():
        record = recs[config_key(cfg)]
        getattr(exports[i], which).append({**record["summary"], "k_shares": record.get("k_shares")})
