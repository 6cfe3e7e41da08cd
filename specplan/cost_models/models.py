"""Model catalogue: decoder shapes of the supported models, and HuggingFace ``config.json`` loading.

Shapes are the published ``config.json`` values. ``mistral-7b`` is Mistral-7B-v0.3 (vocabulary
32768). ``tiny`` is not a real model: a four-layer stack small enough to calibrate on a CPU in
seconds (tests and CI).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from specplan.errors import ConfigError, read_failure


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder-only transformer (Llama-style: GQA attention, gated MLP, RMSNorm)."""

    name: str
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    def shard(self, tp: int) -> "ShardShapes":
        """Per-GPU shapes under tensor parallelism ``tp``.

        Query heads, the MLP and the vocabulary split ``tp`` ways; KV heads split too but are
        replicated when there are fewer of them than GPUs (vLLM's rule), so each GPU holds at least one.
        """
        if self.num_heads % tp or self.intermediate % tp:
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


def _normalise(name: str) -> str:
    """``meta-llama/Llama-3.1-8B-Instruct`` -> ``llama-3.1-8b``; ``Mistral-7B-v0.3`` -> ``mistral-7b``."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    key = re.sub(r"-(instruct|chat|base|hf)$", "", key)
    return re.sub(r"-v0\.\d+$", "", key)


def load_hf_config(path: str | Path) -> ModelSpec:
    """A ``ModelSpec`` from a HuggingFace ``config.json``; errors name the file and the field."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read model config ({read_failure(exc)})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object of model settings")
    for moe_key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if data.get(moe_key):
            raise ConfigError(f"{path}: {moe_key}: mixture-of-experts models are not supported")

    def field(key: str, default: int | None = None) -> int:
        value = data.get(key, default)
        if value is None:
            raise ConfigError(f"{path}: {key}: missing")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{path}: {key}: expected a positive integer, got {value!r}")
        return value

    heads = field("num_attention_heads")
    hidden = field("hidden_size")
    if hidden % heads and "head_dim" not in data:
        raise ConfigError(f"{path}: head_dim: missing and hidden_size is not a multiple of num_attention_heads")
    kv_heads = field("num_key_value_heads", heads)
    if heads % kv_heads:
        raise ConfigError(f"{path}: num_key_value_heads: {kv_heads} does not divide num_attention_heads {heads}")
    name = data.get("_name_or_path") or path.parent.name or path.stem
    return ModelSpec(
        name=_normalise(str(name)),
        num_layers=field("num_hidden_layers"),
        hidden=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=field("head_dim", hidden // heads),
        intermediate=field("intermediate_size"),
        vocab=field("vocab_size"),
    )


def get_model(name_or_path: str) -> ModelSpec:
    """A catalogue model by name (HF ids and ``-Instruct`` suffixes accepted) or a ``config.json`` path."""
    if name_or_path.endswith(".json") or Path(name_or_path).is_file():
        return load_hf_config(name_or_path)
    key = _normalise(name_or_path)
    if key not in MODELS:
        raise ConfigError(
            f"cost.model_name: unknown model {name_or_path!r} (known: {', '.join(MODELS)}, or a config.json path)"
        )
    return MODELS[key]
