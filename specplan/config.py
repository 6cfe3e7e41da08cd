"""Validated configuration: engine, speculation, acceptance, workload and cost sections.

Field names follow the engines' own vocabulary (TensorRT-LLM's ``speculative_config``, vLLM's
``num_speculative_tokens_per_batch_size``). Every model forbids unknown keys, so a typo fails with
one line that names the field.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from typing_extensions import Annotated

from specplan.config_rules import canonical_decoding_type, validate_speculation
from specplan.errors import ConfigError, read_failure


class StrictModel(BaseModel):
    """Frozen, and unknown keys are errors: every config and data-file model derives from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)


_Section = StrictModel


class EngineConfig(_Section):
    """The serving engine's capacity and scheduling settings (one replica)."""

    engine: Literal["trtllm", "vllm"] = "trtllm"
    max_batch_size: int = Field(64, ge=1)
    max_num_tokens: int = Field(8192, ge=1)
    max_num_active_requests: Optional[int] = Field(None, ge=1, description="defaults to max_batch_size")
    kv_block_size: int = Field(32, ge=1)
    kv_num_blocks: Optional[int] = Field(None, ge=1, description="total KV blocks; default from kv_budget_gb")
    kv_budget_gb: Optional[float] = Field(None, gt=0, description="KV memory; default: GPU memory left after weights")
    capacity_scheduler_policy: Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"] = "GUARANTEED_NO_EVICT"
    enable_chunked_prefill: bool = False
    overlap_scheduler: bool = False
    max_model_len: Optional[int] = Field(None, ge=1, description="vLLM: bounds drafts; None = each request's own length")
    enable_prefix_caching: Optional[bool] = Field(
        None, description="vLLM automatic prefix caching; None = the engine's default (vLLM on, TensorRT-LLM off)")


# The one spelling per drafter; aliases (``sa``, ``ngram``, ``vllm-ngram``, ...) are read as these.
DecodingType = Annotated[Literal["none", "NGram", "SA", "vllm_ngram", "suffix", "pld", "AUTO", "MTP", "Eagle3"],
                         BeforeValidator(canonical_decoding_type)]
NEURAL_DRAFTERS = ("MTP", "Eagle3")


class SAEnhancerConfig(_Section):
    """TensorRT-LLM ``SAEnhancerConfig`` (``sa_config`` on a model-based drafter, beta)."""

    threshold: int = Field(4, ge=1, description="SA match length at which the SA draft replaces the neural row")
    enable_global_pool: bool = False


class SpeculationConfig(_Section):
    """Model-free speculative decoding, spelled as TensorRT-LLM's ``speculative_config``.

    ``decoding_type: none`` disables speculation. Where TensorRT-LLM and vLLM differ (schedule
    lookup, verify width, which request count picks K) the setting is explicit here.
    """

    decoding_type: DecodingType = "NGram"
    # 0 means no speculation: the engines reject it, specplan accepts it so sweeps can include K = 0.
    max_draft_len: int = Field(4, ge=0)
    max_matching_ngram_size: Optional[int] = Field(
        None, description="None = the drafter's engine default (NGram 2, SA -1 longest match, PLD 3 / HF 2)"
    )
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True
    enable_global_pool: bool = False
    global_pool_size: Optional[int] = Field(None, ge=1)
    prompt_lookup_min: Optional[int] = Field(None, ge=1)
    prompt_lookup_max: Optional[int] = Field(None, ge=1)
    suffix_max_tree_depth: int = Field(24, ge=1)
    suffix_max_cached_requests: int = Field(10000, ge=-1, description="0 disables the global tree, -1 no limit")
    suffix_max_spec_factor: float = Field(1.0, ge=0)
    suffix_max_spec_offset: float = 0.0
    suffix_min_token_prob: float = Field(0.1, ge=0, le=1)
    pld_variant: Literal["reference", "hf"] = "reference"
    eos_token_ids: Optional[list[int]] = Field(None, description="HF prompt lookup cuts drafts before these tokens")
    sa_config: Optional[SAEnhancerConfig] = Field(None, description="SA enhancer on an MTP / Eagle3 drafter")

    draft_len_schedule: Optional[dict[int, int]] = None
    num_speculative_tokens_per_batch_size: Optional[list[list[int]]] = Field(
        None, description="vLLM entries [start, end, K] or [start, end, ctx_lo, ctx_hi, K]")
    schedule_lookup: Optional[Literal["upper_bound", "lower_bound"]] = Field(
        None, description="None = the path's rule: TRT drafter bisect_right (lower bounds), one-model bisect_left"
    )
    k_from: Optional[Literal["active", "scheduled"]] = Field(
        None, description="None = the path's rule: TRT drafter len(active_requests), TRT one-model the scheduled "
        "batch (update_draft_len), vLLM this step's scheduled count for the next step's drafts"
    )
    max_concurrency: Optional[int] = Field(None, ge=1)
    verify_width: Optional[Literal["static", "runtime", "draft"]] = Field(
        None, description="rows verified per generation request: 1+max_draft_len (NGram padding), 1+K, or 1+drafted"
    )
    acceptance_rate_window_size: Optional[int] = Field(None, ge=0)
    acceptance_rate_threshold: Optional[float] = Field(None, ge=0, le=1)
    acceptance_window: Optional[int] = Field(None, ge=1, description="legacy gate: completed requests per window")
    acceptance_length_threshold: Optional[float] = Field(None, ge=0, description="legacy gate: accepted tokens per step")
    gate_denominator: Optional[Literal["drafted", "padded", "runtime"]] = Field(
        None, description="SpeculationGate denominator; None = the path's rule: drafted (pre-padding, drafter "
        "path), runtime (K per generation row, one-model path); padded = the older num_draft_tokens reading"
    )

    @model_validator(mode="after")
    def _engine_rules(self) -> "SpeculationConfig":
        validate_speculation(self)
        return self


class AcceptanceConfig(_Section):
    """Where acceptance comes from: a parametric oracle or the exact drafter replay."""

    mode: Literal["alpha", "per_position", "length_dist", "drafter", "recorded"] = "drafter"
    alpha: float = Field(0.6, ge=0, le=1)
    per_position: Optional[list[float]] = None
    length_dist: Optional[list[float]] = None
    recorded_path: Optional[str] = None

    @field_validator("per_position")
    @classmethod
    def _rates(cls, v):
        if v is not None and (not v or any(not 0 <= x <= 1 for x in v)):
            raise ValueError("per_position needs one or more conditional rates in [0, 1]")
        return v

    @field_validator("length_dist")
    @classmethod
    def _dist(cls, v):
        if v is not None and (not v or any(x < 0 for x in v) or sum(v) <= 0):
            raise ValueError("length_dist needs non-negative probabilities of accepting 0, 1, 2, ... tokens")
        return v


# A run holds about 5 KB per request (timings, acceptance streams, emissions; tokens are shared with
# the trace), measured by benchmarks/bench_memory.py: two million is ~10 GB. Larger runs are split
# into seeds instead of failing mid-allocation.
MAX_REQUESTS = 2_000_000


class WorkloadConfig(_Section):
    """Traffic: which requests, and when they arrive."""

    trace: Optional[str] = Field("specbench", description="bundled trace name or path; null for synthetic lengths")
    arrival: Literal["poisson", "gamma", "closed_loop", "trace"] = "poisson"
    rate: float = Field(2.0, gt=0, description="requests per second (poisson, gamma)")
    cv: float = Field(1.0, gt=0, description="coefficient of variation of gamma inter-arrivals")
    concurrency: int = Field(8, ge=1, description="closed-loop clients")
    think_time_s: float = Field(0.0, ge=0)
    num_requests: int = Field(200, ge=1, description="at most MAX_REQUESTS (what one run can hold in memory)")
    prompt_len: int = Field(512, ge=1, description="synthetic prompt length when trace is null")
    output_len: int = Field(256, ge=1, description="synthetic output length when trace is null")
    sample_with_replacement: bool = False
    categories: Optional[list[str]] = None
    tokenizer: Optional[str] = Field(
        None, description="model folder (tokenizer.json + tokenizer_config.json chat_template) for a text trace"
    )
    format: Optional[str] = Field(None, description="trace file format (vllm-sharegpt, trtllm-bench, azure, ...); null: sniffed")

    @field_validator("num_requests")
    @classmethod
    def _fits_in_memory(cls, v):
        if v > MAX_REQUESTS:
            raise ValueError(f"{v:,} requests exceed the {MAX_REQUESTS:,} one run can hold in memory (about 5 KB "
                             "each); run several seeds of fewer requests instead")
        return v


class CostConfig(_Section):
    """How a step is priced: the one definition of every cost knob and its documented default.

    Sources of the defaults (``COSTS.md`` and ``ANCHORS.md`` in the design notes):

    - ``eta_mem = 0.80``: achieved fraction of HBM bandwidth streaming weights (Vidur-derived 0.77-0.86, §1).
    - ``eta_comp = 0.70``: achieved fraction of dense peak FLOPs in GEMMs (prefill MFU 0.69-0.76, §1).
    - ``eta_attn = 0.70``: achieved bandwidth reading the KV cache (§1 suggests 0.65-0.70).
    - ``eta_attn_comp = 0.50``: achieved FLOP fraction of attention kernels (FlashAttention-2 about
      0.35-0.5 of H100 peak, FlashAttention-3 up to 0.75).
    - ``gemm_floor_s = attn_floor_s = 5e-6``: per-kernel floor (5-7 us at small TP shards, §1 and §3).
    - ``small_kernels_per_layer = 3`` at ``small_kernel_s = 2e-6``: fused add+RMSNorm twice and SiLU*mul
      per layer (rotary fused into attention), a few microseconds each under CUDA graphs.
    - ``host_overhead_s = 126e-6``, ``host_overhead_per_seq_s = 4e-6``: BLIS's fitted per-step (beta7)
      and per-request (beta6) terms on vLLM (ANCHORS.md, anchor 3).
    - ``cuda_graph_max_tokens = 512``: largest captured token count (vLLM V1 default); counts up to it
      are padded to 1, 2, 4 or the next multiple of 8.
    - ``allreduce_alpha_s`` / ``allreduce_beta_Bps``: TP all-reduce latency and bandwidth; ``None`` takes
      the GPU catalogue's interconnect values (§5: about 10 us and 300 GB/s on NVLink).
    - ``linear_coefficients`` (``c0_s, c_tok_s, c_kv_s, c_seq_s``) or ``linear_fit_csv`` (a calibrate
      ``measurements.csv`` fitted by least squares) for the ``linear`` model; ``draft_fraction``: its
      drafting cost as a fraction of the verify step.
    - ``draft_costs``: a drafting-cost file; ``None`` uses the bundled ``data/profiles/draft_costs.yaml``
      or the ``draft`` section of a measured profile.
    """

    model: Literal["linear_gamma", "table", "roofline", "linear", "profile"] = "roofline"
    t_base_s: float | dict[int, float] = Field(0.01, description="linear_gamma: T(B, 1) in seconds, constant or table over B")
    gamma: float | dict[int, float] = Field(0.1, description="linear_gamma: gamma, constant or table over B")
    draft_cost_s: float = Field(0.0, ge=0, description="linear_gamma/table: drafting seconds per step")
    table_s: Optional[dict[int, dict[int, float]]] = Field(None, description="table: step seconds by B then K")
    gpu: str = "h200"
    model_name: str = "llama-3.1-8b"
    tp: int = Field(1, ge=1)
    profile: Optional[str] = None
    dtype: Literal["bf16", "fp8"] = Field("bf16", description="weights and KV cache (analytic model)")
    eta_mem: float = Field(0.80, gt=0, le=1)
    eta_comp: float = Field(0.70, gt=0, le=1)
    eta_attn: float = Field(0.70, gt=0, le=1)
    eta_attn_comp: float = Field(0.50, gt=0, le=1)
    gemm_floor_s: float = Field(5e-6, ge=0)
    attn_floor_s: float = Field(5e-6, ge=0)
    small_kernels_per_layer: int = Field(3, ge=0)
    small_kernel_s: float = Field(2e-6, ge=0)
    host_overhead_s: float = Field(126e-6, ge=0)
    host_overhead_per_seq_s: float = Field(4e-6, ge=0)
    cuda_graph_padding: bool = True
    cuda_graph_max_tokens: int = Field(512, ge=1)
    allreduce_alpha_s: Optional[float] = Field(None, ge=0)
    allreduce_beta_Bps: Optional[float] = Field(None, gt=0)
    linear_coefficients: Optional[dict[str, float]] = Field(None, description="c0_s, c_tok_s, c_kv_s, c_seq_s")
    linear_fit_csv: Optional[str] = None
    draft_fraction: Optional[float] = Field(None, ge=0)
    draft_costs: Optional[str] = None
    piecewise_cuda_graph_slowdown: Optional[float] = Field(
        None, ge=0, lt=1, description="vLLM dynamic SD step slowdown; None = the published 0.14 (vLLM #49548)")


Router = Literal["round_robin", "least_outstanding", "least_kv", "session_affinity"]


class ClusterConfig(_Section):
    """A fleet: ``replicas`` copies of the engine behind a router that places each request at arrival
    (``specplan.simulator.fleet``). ``replicas: 1`` is the single-replica run."""

    replicas: int = Field(1, ge=1)
    router: Router = "round_robin"
    tp: Optional[list[int]] = Field(None, description="per-replica tensor parallelism; None = cost.tp for every replica")

    @field_validator("tp")
    @classmethod
    def _per_replica(cls, v, info):
        replicas = info.data.get("replicas", 1)
        if v is not None and (len(v) != replicas or min(v) < 1):
            raise ValueError(f"give one degree >= 1 per replica ({replicas}), got {v}")
        return v


class CrossSectionError(ValueError):
    """A rule across sections, raised by the whole config's validator, which pydantic places at the
    root; it carries the field the user should change, for the error line to name."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class SimConfig(_Section):
    """A whole scenario: one engine replica (or a ``cluster`` of them) serving one workload."""

    seed: int = Field(0, ge=0, lt=2**63, description="numpy SeedSequence entropy: a non-negative integer")
    engine: EngineConfig = EngineConfig()
    speculation: SpeculationConfig = SpeculationConfig()
    acceptance: AcceptanceConfig = AcceptanceConfig()
    workload: WorkloadConfig = WorkloadConfig()
    cost: CostConfig = CostConfig()
    cluster: ClusterConfig = ClusterConfig()
    slo_ttft_s: Optional[float] = Field(None, gt=0)
    slo_tpot_s: Optional[float] = Field(None, gt=0)
    max_sim_time_s: Optional[float] = Field(None, gt=0)

    @model_validator(mode="after")
    def _cross_section(self) -> "SimConfig":
        sp, mode = self.speculation, self.acceptance.mode
        if sp.decoding_type in NEURAL_DRAFTERS and mode == "drafter":
            raise CrossSectionError("acceptance.mode", f"{sp.decoding_type} is a model-based drafter; give its "
                                    "acceptance (alpha, per_position, length_dist or recorded)")
        if sp.sa_config is not None and sp.decoding_type not in NEURAL_DRAFTERS:
            raise CrossSectionError("speculation.sa_config", "the SA enhancer applies to MTP or Eagle3 drafters")
        dist = self.acceptance.length_dist
        if mode == "length_dist" and dist and sp.decoding_type != "none" and 0 < sp.max_draft_len < len(dist) - 1:
            raise CrossSectionError(
                "acceptance.length_dist", f"{len(dist)} probabilities (0..{len(dist) - 1} accepted) but "
                f"speculation.max_draft_len {sp.max_draft_len} accepts at most {sp.max_draft_len}; "
                "trim it or raise max_draft_len")
        tps, cost = self.cluster.tp, self.cost
        if tps and len(set(tps)) > 1 and (cost.model not in ("roofline", "profile") or cost.profile):
            # Only the analytic model and profiles named by degree price a TP4 replica apart from a TP1 one.
            raise CrossSectionError(
                "cluster.tp", f"mixed degrees {tps}, but cost.model {cost.model}"
                f"{' with one cost.profile' if cost.profile else ''} prices every replica alike; use roofline "
                "or a profile named by gpu/model (picked per degree), or one degree")
        return self


def format_validation_error(exc, source: str = "config") -> str:
    """Turn a pydantic ValidationError into one line naming the dotted field."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling against the documented fields)"
    rule = err.get("ctx", {}).get("error")
    if isinstance(rule, CrossSectionError):
        loc = rule.field
    return f"{source}: {loc or '<root>'}: {msg}"


def set_dotted(data: dict, dotted: str, value) -> None:
    """Set ``a.b.c = value`` inside nested dicts, creating sections as needed."""
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{dotted}: '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def parse_overrides(items: list[str]) -> list[tuple[str, object]]:
    """``section.key=value`` strings; values are parsed as YAML (``4``, ``true``, ``{4: 4, 8: 2}``)."""
    import yaml

    out = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item}: expected section.key=value")
        key, raw = item.split("=", 1)
        try:
            out.append((key.strip(), yaml.safe_load(raw)))
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {key}: value is not valid YAML ({exc.problem})") from None
    return out


def read_yaml(path) -> dict:
    """Read a YAML mapping strictly (a duplicate key is an error, not "the second wins"); a syntax error
    names the file and line."""
    import yaml
    from pathlib import Path

    from specplan.strict_yaml import strict_load

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such config file")
    if not path.is_file():
        raise ConfigError(f"{path}: not a file; give a YAML config file")
    try:
        data = strict_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({read_failure(exc)})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return data


def build_config(data: dict, source: str = "config") -> SimConfig:
    """Validate a mapping into a SimConfig; any problem becomes one ConfigError line."""
    from pydantic import ValidationError

    try:
        return SimConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def load_config(path=None, overrides: list[str] | None = None, layer=None) -> SimConfig:
    """The config at ``path`` (or the bundled default scenario), then ``layer`` (a function of the
    mapping, e.g. ``engine_config.engine_config_layer(FILE)`` for ``--engine-config``), then ``--set``
    overrides."""
    from pathlib import Path

    if path is None:
        path = Path(__file__).parent / "data" / "default.yaml"
    data = read_yaml(path)
    if layer is not None:
        data = layer(data)
    for key, value in parse_overrides(overrides or []):
        set_dotted(data, key, value)
    return build_config(data, str(path))
