"""Validated configuration: engine, speculation, acceptance, workload and cost sections.

Field names follow the engines' own vocabulary (TensorRT-LLM's ``speculative_config``, vLLM's
``num_speculative_tokens_per_batch_size``). Every model forbids unknown keys, so a typo fails with
one line that names the field.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from typing_extensions import Annotated

from specplan import limits
from specplan.config_rules import (
    CV_REASON,
    GAMMA_REASON,
    INT32_MAX,
    INT32_REASON,
    MAX_CV,
    MAX_GAMMA,
    MAX_STEP_S,
    STEP_REASON,
    at_most,
    canonical_decoding_type,
    check_length_dist,
    validate_speculation,
)
from specplan.config_cross import CrossSectionError, cross_section_rules
from specplan.config_errors import format_validation_error
from specplan.config_overrides import parse_overrides, set_dotted
from specplan.errors import ConfigError, read_failure


class StrictModel(BaseModel):
    """Frozen, and unknown keys are errors: every config and data-file model derives from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _Section(StrictModel):
    """A config section: every number finite. NaN compares false with every bound (a NaN step cost
    never advances the clock) and no setting means "infinite": ``None`` says "no limit" where one exists."""

    model_config = ConfigDict(allow_inf_nan=False)


# Engine counts (slots, tokens, blocks) and costs in seconds, bounded with the reason in the error.
EngineCount = Annotated[int, AfterValidator(at_most(INT32_MAX, INT32_REASON))]
Seconds = Annotated[float, AfterValidator(at_most(MAX_STEP_S, STEP_REASON))]


class EngineConfig(_Section):
    """The serving engine's capacity and scheduling settings (one replica)."""

    engine: Literal["trtllm", "vllm"] = "trtllm"
    version: str = Field("latest", description="engine release whose rules apply (trtllm: 1.2; vllm: 0.32; latest)")
    max_batch_size: EngineCount = Field(64, ge=1)
    max_num_tokens: EngineCount = Field(8192, ge=1)
    max_num_active_requests: Optional[EngineCount] = Field(None, ge=1, description="defaults to max_batch_size")
    kv_block_size: EngineCount = Field(32, ge=1)
    kv_num_blocks: Optional[EngineCount] = Field(None, ge=1, description="total KV blocks; default from kv_budget_gb")
    kv_budget_gb: Optional[float] = Field(None, gt=0, description="KV memory; default: GPU memory left after weights")
    capacity_scheduler_policy: Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"] = "GUARANTEED_NO_EVICT"
    enable_chunked_prefill: bool = False
    context_chunking_policy: Literal["FIRST_COME_FIRST_SERVED", "EQUAL_PROGRESS"] = "FIRST_COME_FIRST_SERVED"
    overlap_scheduler: bool = False
    max_model_len: Optional[EngineCount] = Field(None, ge=1, description="vLLM: bounds drafts; None = each request's own length")
    enable_prefix_caching: Optional[bool] = Field(
        None, description="vLLM automatic prefix caching / TensorRT-LLM block reuse; None = the engine's default "
                          "(on; TensorRT-LLM under synthetic traffic, which shares no block: off)")
    kv_cache_scheduler: Literal["v1", "v2"] = Field(
        "v1", description="TensorRT-LLM: v1 = MicroBatchScheduler charging 1 + max_total_draft_tokens per generation "
        "row with the V1 KV cache manager; v2 = KVCacheV2Scheduler charging 1 + len(py_draft_tokens)")


# The one spelling per drafter; aliases (``sa``, ``ngram``, ``vllm-ngram``, ...) are read as these.
DecodingType = Annotated[Literal["none", "NGram", "SA", "vllm_ngram", "suffix", "pld", "AUTO", "MTP", "Eagle3"],
                         BeforeValidator(canonical_decoding_type)]


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
    max_draft_len: EngineCount = Field(4, ge=0)
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
    gate_denominator: Optional[Literal["drafted", "padded", "static", "runtime"]] = Field(
        None, description="SpeculationGate denominator; None = the path's rule: drafted (pre-padding, drafter "
        "path), static (the C++ draft-token stamp, K_static per generation row, one-model path); padded = the "
        "older num_draft_tokens reading; runtime = the schedule's K per generation row"
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
        return v if v is None else check_length_dist(v)


# The most requests one run takes: the emission log names requests in 32 bits, and ten million is the
# size benchmarks/bench_memory.py --scale measures (a large fleet's day of synthetic lengths, under
# 2 GiB). Whether a run of fewer fits this machine is ``limits.fleet_refusal``'s estimate.
MAX_REQUESTS = 10_000_000


class WorkloadConfig(_Section):
    """Traffic: which requests, and when they arrive."""

    trace: Optional[str] = Field("specbench", description="bundled trace name or path; null for synthetic lengths")
    arrival: Literal["poisson", "gamma", "closed_loop", "trace"] = "poisson"
    rate: float = Field(2.0, gt=0, description="requests per second (poisson, gamma)")
    cv: Annotated[float, AfterValidator(at_most(MAX_CV, CV_REASON))] = Field(1.0, gt=0, description="coefficient of variation of gamma inter-arrivals")
    concurrency: int = Field(8, ge=1, description="closed-loop clients")
    think_time_s: float = Field(0.0, ge=0)
    num_requests: int = Field(200, ge=1, description="at most MAX_REQUESTS (10 million)")
    prompt_len: EngineCount = Field(512, ge=1, description="synthetic prompt length when trace is null")
    output_len: EngineCount = Field(256, ge=1, description="synthetic output length when trace is null")
    sample_with_replacement: bool = False
    categories: Optional[list[str]] = None
    tokenizer: Optional[str] = Field(
        None, description="model folder (tokenizer.json + tokenizer_config.json chat_template) for a text trace"
    )
    format: Optional[str] = Field(None, description="trace file format (vllm-sharegpt, trtllm-bench, azure, burstgpt, ...); "
                                  "when set, the file is never sniffed; null: sniffed")
    format_options: Optional[dict[str, object]] = Field(
        None, description="the format's own settings, e.g. burstgpt {model: GPT-4, log_type: conversation}, "
                          "vllm-sonnet {input_len: 550, prefix_len: 200, output_len: 150}")

    @field_validator("num_requests")
    @classmethod
    def _fits_in_memory(cls, v):
        if v > MAX_REQUESTS:
            raise ValueError(f"{v:,} requests exceed the {MAX_REQUESTS:,} one run takes; run several seeds of "
                             "fewer requests instead")
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
    - Models from their config.json (``specplan.cost_models.architectures``): ``weight_format`` (None: the
      checkpoint's ``quantization_config``, else ``dtype``) and ``kv_cache_dtype`` (None: ``dtype``);
      ``ep``, the expert-parallel degree of the MoE layers within the ``tp`` GPUs (all-to-all dispatch
      and combine); expert popularity for the distinct-experts term, uniform unless ``expert_skew`` (a
      Zipf exponent) or ``expert_load`` (tokens per expert, measured) is set; ``eta_moe_comp = 0.50``:
      achieved FLOP fraction of the grouped expert GEMMs (DeepGEMM reports 0.6-0.75 of FP8 peak on
      large groups, vLLM's fused-MoE Triton kernel less at small ones).
    """

    model: Literal["linear_gamma", "table", "roofline", "linear", "profile"] = "roofline"
    t_base_s: Annotated[float | dict[int, float], AfterValidator(at_most(MAX_STEP_S, STEP_REASON))] = Field(0.01, description="linear_gamma: T(B, 1) in seconds, constant or table over B")
    gamma: Annotated[float | dict[int, float], AfterValidator(at_most(MAX_GAMMA, GAMMA_REASON))] = Field(0.1, description="linear_gamma: gamma, constant or table over B")
    draft_cost_s: Seconds = Field(0.0, ge=0, description="linear_gamma/table: drafting seconds per step")
    table_s: Optional[dict[int, dict[int, Seconds]]] = Field(None, description="table: step seconds by B then K")
    gpu: str = "h200"
    model_name: str = "llama-3.1-8b"
    tp: int = Field(1, ge=1)
    profile: Optional[str] = None
    dtype: Literal["bf16", "fp8"] = Field("bf16", description="weights and KV cache (analytic model)")
    eta_mem: float = Field(0.80, gt=0, le=1)
    eta_comp: float = Field(0.70, gt=0, le=1)
    eta_attn: float = Field(0.70, gt=0, le=1)
    eta_attn_comp: float = Field(0.50, gt=0, le=1)
    gemm_floor_s: Seconds = Field(5e-6, ge=0)
    attn_floor_s: Seconds = Field(5e-6, ge=0)
    small_kernels_per_layer: int = Field(3, ge=0)
    small_kernel_s: Seconds = Field(2e-6, ge=0)
    host_overhead_s: Seconds = Field(126e-6, ge=0)
    host_overhead_per_seq_s: Seconds = Field(4e-6, ge=0)
    cuda_graph_padding: bool = True
    cuda_graph_max_tokens: int = Field(512, ge=1)
    allreduce_alpha_s: Optional[Seconds] = Field(None, ge=0)
    allreduce_beta_Bps: Optional[float] = Field(None, gt=0)
    linear_coefficients: Optional[dict[str, Seconds]] = Field(None, description="c0_s, c_tok_s, c_kv_s, c_seq_s")
    linear_fit_csv: Optional[str] = None
    draft_fraction: Optional[float] = Field(None, ge=0)
    draft_costs: Optional[str] = None
    piecewise_cuda_graph_slowdown: Optional[float] = Field(
        None, ge=0, lt=1, description="vLLM dynamic SD step slowdown; None = the published 0.14 (vLLM #49548)")
    weight_format: Optional[Literal["bf16", "fp8", "int4", "nvfp4", "mxfp4"]] = Field(
        None, description="weights' storage format; None = the config.json's quantization_config, else dtype")
    kv_cache_dtype: Optional[Literal["bf16", "fp8"]] = Field(None, description="KV cache format; None = dtype")
    ep: int = Field(1, ge=1, description="expert-parallel degree of MoE layers (divides tp)")
    expert_skew: float = Field(0.0, ge=0, description="Zipf exponent of expert popularity (0 = uniform router)")
    expert_load: Optional[list[float]] = Field(None, description="measured tokens routed to each expert")
    eta_moe_comp: float = Field(0.50, gt=0, le=1)


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
        cross_section_rules(self)
        return self

    @model_validator(mode="after")
    def _fits(self) -> "SimConfig":
        """A run whose replicas, clients and requests cannot fit this machine's memory is refused before
        any work (``specplan.limits``); a KV budget larger than its GPU is refused where the GPU is
        known (``cost_models.capacity``)."""
        refusal = limits.fleet_refusal(self, self.cluster.replicas)
        if refusal is not None:
            raise CrossSectionError(*refusal)
        return self


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
