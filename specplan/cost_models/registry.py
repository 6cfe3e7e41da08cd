"""Build a cost model from configuration, and resolve profile names.

``make_cost_model(cfg)`` maps ``CostConfig.model`` to a model:

- ``linear_gamma`` / ``table``: ``simple`` (t_base_s, gamma, draft_cost_s / table_s);
- ``roofline``: analytic model of ``gpu``, ``model_name`` (catalogue name or ``config.json`` path), ``tp``;
- ``linear``: ``linear_coefficients`` or a fit to ``linear_fit_csv``;
- ``profile``: ``cost_model_from_profile(cfg.profile)``; with no profile set, the bundled name
  ``{gpu}/{model_name}`` (``/tp{N}`` added for TP > 1).

Profile names. ``NAME|PATH`` is a file when such a file exists; otherwise a bundled name
``GPU/MODEL[/tpN]``: ``specplan/data/profiles/NAME.yaml`` when bundled, else, when GPU and MODEL are
catalogued, the analytic roofline of that GPU and model (the same thing an analytic bundled file
says, built on the fly). The default scenario's profile, ``h200/llama-3.1-8b``, is bundled as an
analytic file with its provenance; a GPU calibration run replaces it with a measured one.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from specplan.cost_models.base import CostModel
from specplan.cost_models.draft import DraftCost
from specplan.cost_models.hardware import get_gpu
from specplan.cost_models.linear import LinearCoefficients, LinearCostModel, fit_linear_csv
from specplan.cost_models.models import get_model
from specplan.config import CostConfig
from specplan.cost_models.roofline import RooflineCostModel
from specplan.cost_models.simple import LinearGammaCostModel, TableCostModel
from specplan.errors import ConfigError

if TYPE_CHECKING:  # measured profiles (pydantic schemas) load only when a profile is asked for
    from specplan.cost_models.profile import ProfileFile

DEFAULT_SM_COUNT = 132  # H100/H200, for SA drafting when a measured profile names no catalogued GPU
_NAME = re.compile(r"^(?P<gpu>[\w.-]+)/(?P<model>[\w.-]+)(?:/tp(?P<tp>\d+))?$")


def _bundled_root():
    return resources.files("specplan").joinpath("data", "profiles")


def bundled_profile_names() -> list[str]:
    """Names of the profile files shipped with the package, sorted.

    A measured profile ``NAME.yaml`` may ship with its calibration record beside it as
    ``NAME.meta.yaml`` and ``NAME.measurements.csv``; those are not profiles.
    """
    root = Path(str(_bundled_root()))
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.yaml")
                  if p.parent != root and not p.name.endswith(".meta.yaml"))


def load_profile(name_or_path: str) -> tuple[ProfileFile, str]:
    """``(profile, source)`` for a path or bundled name (see the module docstring)."""
    from specplan.cost_models.profile import PROFILE_FORMAT, ProfileFile, Provenance, parse_profile, read_profile

    path = Path(name_or_path)
    if path.is_file():
        return read_profile(path), str(path)
    bundled = _bundled_root().joinpath(*f"{name_or_path}.yaml".split("/"))
    if bundled.is_file():
        return parse_profile(bundled.read_text(), f"bundled profile {name_or_path}"), f"bundled {name_or_path}"
    m = _NAME.match(name_or_path)
    if m is None:
        raise ConfigError(
            f"profile {name_or_path!r}: no such file, and not a bundled name GPU/MODEL[/tpN] "
            f"(bundled: {', '.join(bundled_profile_names())})"
        )
    tp = int(m["tp"] or 1)
    try:
        get_gpu(m["gpu"]), get_model(m["model"]).shard(tp)
    except ConfigError as exc:
        raise ConfigError(f"profile {name_or_path!r}: no such file or bundled profile, and {exc}") from None
    profile = ProfileFile(
        format=PROFILE_FORMAT, name=name_or_path, gpu=m["gpu"], model=m["model"], tp=tp,
        provenance=Provenance(kind="analytic", source="catalogue roofline (no bundled file of this name)"),
    )
    return profile, f"analytic {name_or_path}"


def _draft_for(profile: ProfileFile, options: CostConfig, sm_count: int) -> DraftCost:
    if options.draft_costs is not None or profile.draft is None:
        return DraftCost.load(options.draft_costs, sm_count)
    return DraftCost(profile.draft, sm_count)


def cost_model_from_profile(name_or_path: str, options: CostConfig = CostConfig()) -> CostModel:
    """A cost model for a profile: roofline for analytic ones, ``ProfileCostModel`` for measured ones."""
    from specplan.cost_models.profile import ProfileCostModel

    profile, source = load_profile(name_or_path)
    if profile.provenance.kind == "analytic":
        gpu = get_gpu(profile.gpu)
        opts = options.model_copy(update={"dtype": profile.dtype})
        return RooflineCostModel(gpu, get_model(profile.model), profile.tp, opts,
                                 draft=DraftCost.load(options.draft_costs, gpu.sm_count), source=source)
    gpu = get_gpu(profile.gpu) if profile.gpu else None
    alpha = options.allreduce_alpha_s if options.allreduce_alpha_s is not None else (gpu and gpu.allreduce_alpha_s)
    beta = options.allreduce_beta_Bps if options.allreduce_beta_Bps is not None else (gpu and gpu.allreduce_beta_Bps)
    allreduce = (alpha, beta) if alpha is not None and beta else None
    draft = _draft_for(profile, options, gpu.sm_count if gpu else DEFAULT_SM_COUNT)
    return ProfileCostModel(profile, draft, options, source, allreduce)


def default_profile_name(gpu: str, model_name: str, tp: int) -> str:
    """The bundled name for a scenario: ``gpu/model`` plus ``/tpN`` when TP > 1."""
    return f"{gpu.lower()}/{model_name.lower()}" + (f"/tp{tp}" if tp > 1 else "")


def make_cost_model(cfg: CostConfig) -> CostModel:
    """The cost model ``cfg`` asks for; every knob is a ``CostConfig`` field."""
    options = cfg
    kind = cfg.model
    if kind == "linear_gamma":
        return LinearGammaCostModel(cfg.t_base_s, cfg.gamma, cfg.draft_cost_s)
    if kind == "table":
        if cfg.table_s is None:
            raise ConfigError("cost.table_s: required when cost.model is table (step seconds by B, then K)")
        return TableCostModel(cfg.table_s)
    if kind == "roofline":
        gpu = get_gpu(cfg.gpu)
        return RooflineCostModel(gpu, get_model(cfg.model_name), cfg.tp, options,
                                 draft=DraftCost.load(options.draft_costs, gpu.sm_count))
    if kind == "linear":
        if options.linear_coefficients is not None:
            coefficients = LinearCoefficients.from_mapping(options.linear_coefficients)
        elif options.linear_fit_csv is not None:
            coefficients = fit_linear_csv(options.linear_fit_csv)
        else:
            raise ConfigError("cost.linear_coefficients: required when cost.model is linear (or cost.linear_fit_csv)")
        draft = DraftCost.load(options.draft_costs, get_gpu(cfg.gpu).sm_count)
        return LinearCostModel(coefficients, draft, options.draft_fraction)
    if kind == "profile":
        name = cfg.profile or default_profile_name(cfg.gpu, cfg.model_name, cfg.tp)
        return cost_model_from_profile(name, options)
    raise ConfigError(f"cost.model: unknown cost model {kind!r}")
