"""Model catalogue: decoder shapes of the supported models, and HuggingFace ``config.json`` loading.

Shapes are the published ``config.json`` values. ``mistral-7b`` is Mistral-7B-v0.3 (vocabulary
32768). ``tiny`` is not a real model: a four-layer stack small enough to calibrate on a CPU in
seconds (tests and CI). The mixture-of-experts, MLA, sliding-window and quantized models of the
catalogue are read from their own config.json files under ``specplan/data/models`` (each with a
SOURCE note) by ``specplan.cost_models.architectures``, which also reads any model folder or file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal, Optional

from specplan.errors import ConfigError


@dataclass(frozen=True)
class MoESpec:
    """Routed experts of the MoE layers: ``top_k`` of ``num_experts`` gated MLPs of width
    ``expert_intermediate`` per token, plus always-on shared experts of total width ``shared_intermediate``."""

    num_experts: int
    top_k: int
    expert_intermediate: int
    shared_intermediate: int
    num_moe_layers: int  # the other layers have a dense MLP of ModelSpec.intermediate


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): a compressed KV latent of ``kv_lora_rank`` plus a
    shared rotary key of ``qk_rope_head_dim`` per token and layer."""

    q_lora_rank: int  # 0: queries projected directly from the hidden state
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class WindowSpec:
    """``num_layers`` layers whose tokens attend to at most ``size`` keys: a sliding window (gpt-oss,
    Gemma 3), or chunked attention (Llama 4: within ``size``-token chunks, at most ``size`` keys)."""

    size: int
    num_layers: int
    kind: Literal["sliding", "chunked"] = "sliding"


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer: Llama-style GQA attention, gated MLP and RMSNorm, optionally with
    routed experts (``moe``), latent attention (``mla``), windowed layers (``window``) and weights stored
    in a quantized checkpoint format (``weight_format``; ``attention_unquantized`` when the checkpoint
    keeps attention in BF16, as gpt-oss does)."""

    name: str
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    moe: Optional[MoESpec] = None
    mla: Optional[MLASpec] = None
    window: Optional[WindowSpec] = None
    weight_format: Optional[str] = None
    attention_unquantized: bool = False
    tied_embeddings: bool = False

    @property
    def dense_layers(self) -> int:
        """Layers with a dense MLP (all of them for a dense model)."""
        return self.num_layers - (self.moe.num_moe_layers if self.moe else 0)

    def shard(self, tp: int) -> "ShardShapes":
        """Per-GPU shapes under tensor parallelism ``tp``.

        Query heads, the MLP and the vocabulary split ``tp`` ways; KV heads split too but are
        replicated when there are fewer of them than GPUs (vLLM's rule), so each GPU holds at least one.
        """
        if self.num_heads % tp or (self.dense_layers and self.intermediate % tp):
            raise ConfigError(
                f"cost.tp: {tp} does not divide {self.name}'s {self.num_heads} heads and {self.intermediate} MLP width"
            )
        return ShardShapes(
            q_heads=self.num_heads // tp,
            kv_heads=max(1, math.ceil(self.num_kv_heads / tp)),
            intermediate=self.intermediate // tp,
            vocab=math.ceil(self.vocab / tp),
        )


@dataclass(frozen=True)
class ShardShapes:
    """What one GPU holds of each layer under tensor parallelism."""

    q_heads: int
    kv_heads: int
    intermediate: int
    vocab: int


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256),
        ModelSpec("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256),
        ModelSpec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000),  # the model of Vidur's published runs
        ModelSpec("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064),
        ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32768),
        ModelSpec("tiny", 4, 256, 4, 2, 64, 768, 2048),
    )
}


def normalise_name(name: str) -> str:
    """``meta-llama/Llama-3.1-8B-Instruct`` -> ``llama-3.1-8b``; ``Mistral-7B-Instruct-v0.3`` -> ``mistral-7b``;
    ``google/gemma-3-27b-it`` -> ``gemma-3-27b``."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    key = re.sub(r"-v0\.\d+$", "", key)
    return re.sub(r"-(instruct|chat|base|hf|it)$", "", key)


def _catalogue_root() -> Path:
    return Path(str(resources.files("specplan").joinpath("data", "models")))


def catalogue_names() -> list[str]:
    """Every catalogued model: the dense shapes above, then the config.json folders under data/models."""
    return [*MODELS, *sorted(p.parent.name for p in _catalogue_root().glob("*/config.json"))]


def load_hf_config(path: str | Path) -> ModelSpec:
    """A ``ModelSpec`` from a HuggingFace ``config.json`` or a model folder; errors name the file and the field."""
    from specplan.cost_models.architectures import load_config

    return load_config(path)


def get_model(name_or_path: str) -> ModelSpec:
    """A catalogue model by name (HF ids and ``-Instruct`` suffixes accepted), or a ``config.json`` file or
    model folder."""
    path = Path(name_or_path)
    if name_or_path.endswith(".json") or path.is_file() or (path / "config.json").is_file():
        return load_hf_config(name_or_path)
    key = normalise_name(name_or_path)
    if key in MODELS:
        return MODELS[key]
    folder = _catalogue_root() / key
    if (folder / "config.json").is_file():
        from specplan.cost_models.architectures import read_config, parse_config

        data, file = read_config(folder)
        return parse_config(data, f"catalogue model {key} ({file.name})", key)
    raise ConfigError(f"cost.model_name: unknown model {name_or_path!r} (known: {', '.join(catalogue_names())}, "
                      "or a config.json file or model folder)")
