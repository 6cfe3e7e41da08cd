"""Read a HuggingFace ``config.json`` (a file or a model folder) into a ``ModelSpec``, per architecture.

Supported ``model_type`` values and what is read (field names are the configs' own):

- dense: ``llama``, ``mistral``, ``qwen2``, ``qwen3`` (GQA attention, gated MLP); ``gemma3_text``
  (Gemma 3; every ``sliding_window_pattern``-th layer global, the others a ``sliding_window``);
- ``mixtral``: ``num_local_experts``, ``num_experts_per_tok`` experts of ``intermediate_size``, every layer;
- ``qwen2_moe``, ``qwen3_moe``: ``num_experts``, ``num_experts_per_tok`` of ``moe_intermediate_size``
  every ``decoder_sparse_step`` layers except ``mlp_only_layers``; Qwen2-MoE's shared expert
  ``shared_expert_intermediate_size``;
- ``deepseek_v2``, ``deepseek_v3``: MLA (``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
  ``qk_rope_head_dim``, ``v_head_dim``), ``n_routed_experts`` of ``moe_intermediate_size`` plus
  ``n_shared_experts``, dense MLP of ``intermediate_size`` in the first ``first_k_dense_replace`` layers;
- ``gpt_oss``: ``num_local_experts`` of ``intermediate_size``, ``layer_types`` alternating sliding and
  full attention over ``sliding_window``, attention sinks (one logit per head: no price), MXFP4 experts;
- ``llama4_text`` (inside Llama-4's ``text_config``): ``num_local_experts`` of ``intermediate_size``
  plus one shared expert of the same width on the MoE layers (every ``interleave_moe_layer_step``-th),
  dense MLP ``intermediate_size_mlp`` elsewhere; chunked attention over ``attention_chunk_size`` on the
  RoPE layers (``no_rope_layers``; by default every fourth layer is a global NoPE layer).

Multimodal wrappers (``llama4``, ``gemma3``) are read through their ``text_config``; the vision tower
is not priced (a text-only serving step does not run it). ``quantization_config`` sets the checkpoint's
weight format (``quantization.format_from_quant_config``). Missing fields take the transformers
configuration class's default where the architecture has one (``_DEFAULTS``). A ``model_type`` not
listed, or a field this reader does not price that changes the cost, is refused in one line naming it:
nothing is read as dense by default. A config without ``model_type`` is read as a dense Llama-style
model only when it has no mixture-of-experts or latent-attention field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from specplan.cost_models.models import MLASpec, MoESpec, ModelSpec, WindowSpec, normalise_name
from specplan.cost_models.quantization import format_from_quant_config
from specplan.errors import ConfigError, read_failure

DENSE = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss", "llama4_text")
_WRAPPERS = {"llama4": "llama4_text", "gemma3": "gemma3_text"}
# transformers' configuration defaults for fields the published configs leave out.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262208, "sliding_window_pattern": 6, "sliding_window": 4096,
                    "tie_word_embeddings": True, "head_dim": 256},
    "llama4_text": {"interleave_moe_layer_step": 1, "attention_chunk_size": 8192, "num_experts_per_tok": 1},
    "qwen3_moe": {"decoder_sparse_step": 1, "mlp_only_layers": []},
    "qwen2_moe": {"decoder_sparse_step": 1, "mlp_only_layers": []},
    "deepseek_v3": {"first_k_dense_replace": 0, "moe_layer_freq": 1, "n_shared_experts": 0},
    "deepseek_v2": {"first_k_dense_replace": 0, "moe_layer_freq": 1, "n_shared_experts": 0},
}
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_MLA_KEYS = ("kv_lora_rank",)
_WINDOW_TYPES = {"full_attention": None, "sliding_attention": "sliding", "chunked_attention": "chunked"}


def read_config(path: str | Path) -> tuple[dict, Path]:
    """The JSON object of ``path`` (a config.json, or a folder holding one) and the file read."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read model config ({read_failure(exc)})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object of model settings")
    return data, path


class _Fields:
    """Typed reads of one config object; every error names the file and the field."""

    def __init__(self, data: dict, where: str, defaults: dict) -> None:
        self.data, self.where, self.defaults = data, where, defaults

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, self.defaults.get(key, default))

    def int(self, key: str, default: Optional[int] = None, minimum: int = 1) -> int:
        value = self.get(key, default)
        if value is None:
            raise ConfigError(f"{self.where}: {key}: missing")
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ConfigError(f"{self.where}: {key}: expected {what}, got {value!r}")
        return value

    def refuse(self, key: str, why: str) -> ConfigError:
        return ConfigError(f"{self.where}: {key}: {why}")


def load_config(path: str | Path) -> ModelSpec:
    """A ``ModelSpec`` from a config.json file or a model folder; errors name the file and the field."""
    data, file = read_config(path)
    name = data.get("_name_or_path") or (file.parent.name if file.parent.name else file.stem)
    return parse_config(data, str(file), normalise_name(str(name)))


def parse_config(data: dict, where: str, name: str) -> ModelSpec:
    """A ``ModelSpec`` named ``name`` from a config object (see the module docstring)."""
    quant = data.get("quantization_config")
    model_type = data.get("model_type")
    if model_type in _WRAPPERS:
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise ConfigError(f"{where}: text_config: missing (a {model_type} config keeps its decoder there)")
        data, model_type = text, text.get("model_type", _WRAPPERS[model_type])
    if model_type is None:
        for key in (*_MOE_KEYS, *_MLA_KEYS):
            if data.get(key):
                kind = "mixture-of-experts" if key in _MOE_KEYS else "latent attention"
                raise ConfigError(f"{where}: model_type: missing, and {key} ({kind}) is read per architecture; "
                                  f"add the model's model_type ({', '.join(MOE)})")
    elif model_type not in DENSE + MOE:
        raise ConfigError(f"{where}: model_type: {model_type!r} is not supported "
                          f"(supported: {', '.join(DENSE + MOE)})")
    f = _Fields(data, where, _DEFAULTS.get(model_type or "", {}))
    fmt, skipped = format_from_quant_config(quant, where)
    base = _attention_and_sizes(f, model_type)
    return ModelSpec(name=name, **base, moe=_moe(f, model_type, base["num_layers"]),
                     window=_window(f, model_type, base["num_layers"]), weight_format=fmt,
                     attention_unquantized=any("self_attn" in s for s in skipped),
                     tied_embeddings=bool(f.get("tie_word_embeddings", False)))


def _attention_and_sizes(f: _Fields, model_type: Optional[str]) -> dict:
    if model_type not in ("deepseek_v2", "deepseek_v3") and f.data.get("kv_lora_rank"):
        raise f.refuse("kv_lora_rank", f"latent attention in a {model_type} config is not priced")
    if model_type in DENSE:
        for key in _MOE_KEYS:
            if f.data.get(key):
                raise f.refuse(key, f"experts in a dense {model_type} config are not priced")
    heads = f.int("num_attention_heads")
    hidden = f.int("hidden_size")
    if hidden % heads and f.get("head_dim") is None:
        raise f.refuse("head_dim", "missing and hidden_size is not a multiple of num_attention_heads")
    kv_heads = f.int("num_key_value_heads", heads)
    if heads % kv_heads:
        raise f.refuse("num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}")
    layers = f.int("num_hidden_layers")
    mla = None
    if model_type in ("deepseek_v2", "deepseek_v3"):
        q_lora = f.get("q_lora_rank")
        mla = MLASpec(q_lora_rank=0 if q_lora is None else f.int("q_lora_rank"), kv_lora_rank=f.int("kv_lora_rank"),
                      qk_nope_head_dim=f.int("qk_nope_head_dim"), qk_rope_head_dim=f.int("qk_rope_head_dim"),
                      v_head_dim=f.int("v_head_dim"))
    # Dense-layer MLP width: Llama 4 names it intermediate_size_mlp (its intermediate_size is the experts').
    inter_key = "intermediate_size_mlp" if model_type == "llama4_text" else "intermediate_size"
    return dict(num_layers=layers, hidden=hidden, num_heads=heads, num_kv_heads=kv_heads,
                head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim if mla else f.int("head_dim", hidden // heads),
                intermediate=f.int(inter_key),
                vocab=f.int("vocab_size"), mla=mla)


def _moe(f: _Fields, model_type: Optional[str], layers: int) -> Optional[MoESpec]:
    if model_type not in MOE:
        return None
    top_k = f.int("num_experts_per_tok", f.get("experts_per_token"))
    if model_type in ("mixtral", "gpt_oss"):
        return MoESpec(f.int("num_local_experts"), top_k, f.int("intermediate_size"), 0, layers)
    if model_type == "llama4_text":
        step = f.int("interleave_moe_layer_step")
        moe_layers = f.get("moe_layers")
        count = len(moe_layers) if isinstance(moe_layers, list) else len(range(step - 1, layers, step))
        width = f.int("intermediate_size")
        return MoESpec(f.int("num_local_experts"), top_k, width, width, count)  # one shared expert
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step, dense_only = f.int("decoder_sparse_step"), f.get("mlp_only_layers") or []
        count = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
        shared = f.int("shared_expert_intermediate_size", 0, minimum=0) if model_type == "qwen2_moe" else 0
        return MoESpec(f.int("num_experts"), top_k, f.int("moe_intermediate_size"), shared, count)
    if f.int("moe_layer_freq") != 1:  # DeepSeek-V2/V3: every layer past the first dense ones
        raise f.refuse("moe_layer_freq", f"{f.get('moe_layer_freq')} is not priced (only 1, every layer)")
    width = f.int("moe_intermediate_size")
    dense = f.int("first_k_dense_replace", minimum=0)
    return MoESpec(f.int("n_routed_experts"), top_k, width, f.int("n_shared_experts", minimum=0) * width,
                   layers - min(dense, layers))


def _window(f: _Fields, model_type: Optional[str], layers: int) -> Optional[WindowSpec]:
    types = f.get("layer_types")
    if isinstance(types, list):
        if len(types) != layers:
            raise f.refuse("layer_types", f"{len(types)} entries for {layers} layers")
        unknown = sorted({t for t in types if t not in _WINDOW_TYPES})
        if unknown:
            raise f.refuse("layer_types", f"{unknown[0]!r} is not priced (known: {', '.join(_WINDOW_TYPES)})")
        kinds = {_WINDOW_TYPES[t] for t in types} - {None}
        if len(kinds) > 1:
            raise f.refuse("layer_types", "sliding and chunked layers in one model are not priced")
        if not kinds:
            return None
        kind = kinds.pop()
        size = f.int("attention_chunk_size" if kind == "chunked" else "sliding_window")
        return WindowSpec(size, sum(1 for t in types if _WINDOW_TYPES[t]), kind)
    if model_type == "gemma3_text":
        pattern = f.int("sliding_window_pattern")
        count = sum(1 for i in range(layers) if (i + 1) % pattern)
        return WindowSpec(f.int("sliding_window"), count) if count else None
    if model_type == "llama4_text":
        no_rope = f.get("no_rope_layers")
        if isinstance(no_rope, list) and len(no_rope) == layers:  # 1: RoPE (chunked) layer, 0: global NoPE layer
            count = sum(1 for x in no_rope if x)
        else:
            count = sum(1 for i in range(layers) if (i + 1) % f.int("no_rope_layer_interval", 4))
        return WindowSpec(f.int("attention_chunk_size"), count, "chunked") if count else None
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        if not f.get("use_sliding_window", False):
            return None  # their sliding_window field is inert unless use_sliding_window is set
        first = f.int("max_window_layers", layers, minimum=0)
        return WindowSpec(f.int("sliding_window"), max(0, layers - first)) if first < layers else None
    if f.get("sliding_window") is not None and model_type in ("mistral", "mixtral", None):
        return WindowSpec(f.int("sliding_window"), layers)  # Mistral-7B-v0.1: every layer
    if f.get("sliding_window") is not None and model_type in ("gpt_oss", "llama"):
        raise f.refuse("sliding_window", "set without layer_types: which layers slide is not known")
    return None
