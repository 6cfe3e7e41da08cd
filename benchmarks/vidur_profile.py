"""Vidur's operator profiles for one A100 serving Llama-2-7B, written where Vidur looks for them.

Vidur 0.0.26 reads its per-operator GPU times (``mlp.csv.xz``, ``attention.csv.xz``) from Hugging
Face datasets that it downloads at run time; the wheel ships none. The paired benchmark therefore
writes the same files itself, priced by a per-operator roofline on the A100 of specplan's GPU
catalogue (the HBM bandwidth and bf16 peak, at the achieved fractions of them, that specplan's own
roofline for ``benchmarks/scenarios/vidur.yaml`` uses), into the Hugging Face cache layout under Vidur's cache
folder, and runs Vidur with ``HF_HUB_OFFLINE=1`` so that it finds them there. The step times come
out close to specplan's for the same batches, so both tools simulate runs of about the same length
(the benchmark prints both makespans). The grids are small (a few hundred rows), so Vidur's one-off
model training is quick and its cached models are no larger than those measured data would give.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

# this tree's specplan, as the runs' ``python -m`` from the repository finds it
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from specplan.config import CostConfig  # noqa: E402
from specplan.cost_models.hardware import GPUS  # noqa: E402

MODEL = "meta-llama/Llama-2-7b-hf"
DEVICE, NETWORK_DEVICE = "a100", "a100_dgx"
COMPUTE_DATASET, NETWORK_DATASET = "specplan/vidur-a100-llama-2-7b", "specplan/vidur-a100-dgx"
HEADS, EMBED, MLP_HIDDEN, VOCAB, BLOCK = 32, 4096, 11008, 32768, 16  # Vidur's Llama-2-7B, block size
HALF = 2  # bytes per fp16 value
LAUNCH_MS = 0.005  # the least a kernel takes (launch and tail), so tiny operators are not free


def _op_ms(flops: float, nbytes: float, attention: bool = False) -> float:
    """Milliseconds of one operator on the catalogue's A100 at specplan's default achieved fractions of
    its peaks: compute- or memory-bound, whichever is slower."""
    gpu, eta = GPUS[DEVICE], CostConfig()
    comp = eta.eta_attn_comp if attention else eta.eta_comp
    mem = eta.eta_attn if attention else eta.eta_mem
    return max(LAUNCH_MS, 1e3 * max(flops / (gpu.bf16_flops * comp), nbytes / (gpu.hbm_bw * mem)))


def _linear_ms(n: int, d_in: int, d_out: int) -> float:
    return _op_ms(2 * n * d_in * d_out, HALF * (d_in * d_out + n * (d_in + d_out)))


def _elementwise_ms(n: int, values: int) -> float:
    return _op_ms(n * values, HALF * n * values)


def _attention_ms(queries: int, context: int, seqs: int = 1) -> float:
    """Attention of ``seqs`` sequences in one kernel: QK and PV over ``context`` positions for
    ``queries`` queries each, reading each one's KV."""
    return _op_ms(4 * seqs * queries * context * EMBED, 2 * HALF * seqs * context * EMBED, attention=True)


def mlp_table() -> pd.DataFrame:
    """Per-layer operator times against the tokens in the batch (Vidur's ``mlp.csv`` columns)."""
    rows = []
    for n in sorted({*range(1, 129), *range(160, 4097, 32)}):
        times = {
            "attn_pre_proj": _linear_ms(n, EMBED, 3 * EMBED), "attn_post_proj": _linear_ms(n, EMBED, EMBED),
            "mlp_up_proj": _linear_ms(n, EMBED, 2 * MLP_HIDDEN), "mlp_down_proj": _linear_ms(n, MLP_HIDDEN, EMBED),
            "mlp_act": _elementwise_ms(n, 3 * MLP_HIDDEN), "input_layernorm": _elementwise_ms(n, 2 * EMBED),
            "post_attention_layernorm": _elementwise_ms(n, 2 * EMBED), "attn_rope": _elementwise_ms(n, 4 * EMBED),
            "add": _elementwise_ms(n, 3 * EMBED),
        }
        rows.append({"n_head": HEADS, "n_kv_head": HEADS, "n_embd": EMBED, "n_expanded_embd": MLP_HIDDEN,
                     "vocab_size": VOCAB, "use_gated_mlp": True, "num_tokens": n, "num_tensor_parallel_workers": 1,
                     **{f"time_stats.{k}.median": v for k, v in times.items()}})
    return pd.DataFrame(rows)


def attention_table() -> pd.DataFrame:
    """Per-layer attention times: decode batches by size and mean context, prefill chunks by size and
    the context before them (Vidur's ``attention.csv`` columns)."""
    rows = []
    contexts = range(0, 4097, 256)
    for batch in (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128):
        for kv in contexts:
            rows.append((batch, 0, kv, _attention_ms(1, kv + 1, batch)))
    for chunk in (32, 64, *range(128, 4097, 128)):
        for kv in contexts:
            if kv + chunk <= 4096:
                rows.append((1, chunk, kv, _attention_ms(chunk, kv + chunk)))
    df = pd.DataFrame(rows, columns=["batch_size", "prefill_chunk_size", "kv_cache_size", "time"])
    decode = df["prefill_chunk_size"] == 0
    df["time_stats.attn_decode.median"] = df["time"].where(decode, 0.0)
    df["time_stats.attn_prefill.median"] = df["time"].where(~decode, 0.0)
    tokens = df[["prefill_chunk_size", "batch_size"]].max(axis=1)
    df["time_stats.attn_kv_cache_save.median"] = [_elementwise_ms(n, 2 * EMBED) for n in tokens]
    df["is_prefill"] = ~decode
    return df.drop(columns="time").assign(n_embd=EMBED, n_q_head=HEADS, n_kv_head=HEADS, block_size=BLOCK,
                                          num_tensor_parallel_workers=1, max_model_len=4096)


def network_table(collective: str) -> pd.DataFrame:
    """A stand-in network profile: Vidur opens the files, but one GPU (no tensor or pipeline
    parallelism) never reads a row of them."""
    return pd.DataFrame({"size": [2 ** 20], "num_workers": [1], "devices_per_node": [1], "collective": [collective],
                         f"time_stats.{collective}.median": [0.0]})


def _snapshot(cache: Path, dataset: str, config: dict, tables: dict[str, pd.DataFrame]) -> None:
    """Write ``tables`` as one dataset snapshot in the Hugging Face cache layout under ``cache``."""
    root = cache / ("datasets--" + dataset.replace("/", "--"))
    snap = root / "snapshots" / "local"
    snap.mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text("local")
    (snap / "config.json").write_text(json.dumps(config))
    for name, df in tables.items():
        df.to_csv(snap / f"{name}.csv.xz", index=False)


def write_profiles(vidur_cache: Path) -> None:
    """Write both datasets under ``vidur_cache`` (Vidur's ``cache_dir``), unless they are there already."""
    if (vidur_cache / "profiling_data" / "compute" / ("datasets--" + COMPUTE_DATASET.replace("/", "--"))).exists():
        return
    _snapshot(vidur_cache / "profiling_data" / "compute", COMPUTE_DATASET, {"model": MODEL, "device_sku": DEVICE},
              {"mlp": mlp_table(), "attention": attention_table()})
    _snapshot(vidur_cache / "profiling_data" / "network", NETWORK_DATASET, {"sku": NETWORK_DEVICE},
              {"all_reduce": network_table("all_reduce"), "send_recv": network_table("send_recv")})
