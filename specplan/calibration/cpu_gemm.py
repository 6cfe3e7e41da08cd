"""The GEMMs a CPU calibration times: the CPU engine's own, where vLLM is installed.

vLLM's CPU backend does not run torch's ``F.linear`` for an unquantized linear layer. When the
weights load, ``dispatch_cpu_unquantized_gemm`` (``vllm/model_executor/layers/utils.py``, 0.32)
picks each layer's GEMM: zentorch where installed on a Zen CPU, the SGL packed kernel for small
weights, otherwise a oneDNN matmul over a prepacked weight. On an AMD EPYC here, ``F.linear``
(MKL) took 1.5-3x oneDNN's time on SmolLM2-135M's shapes (the LM head at one row: 11.9 vs 4.9 ms).
A stack timed with ``F.linear`` there predicted the engine's decode steps 40-50% slow. So the stack
takes ``EngineGemm``, which calls that same dispatch on each weight once.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

Gemm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x [..., in], weight [out, in]) -> [..., out]


class EngineGemm:
    """``F.linear`` as vLLM's CPU backend runs it. Each weight goes through the engine's
    ``dispatch_cpu_unquantized_gemm`` when it is first used; that is warm-up, which the timers
    leave out."""

    name = "vLLM's CPU GEMM dispatch (dispatch_cpu_unquantized_gemm)"

    def __init__(self) -> None:
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        self._dispatch = dispatch_cpu_unquantized_gemm
        self._layers: dict[int, torch.nn.Module] = {}  # by weight storage: holds the prepacked weights

    def __call__(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        layer = self._layers.get(weight.data_ptr())
        if layer is None:
            layer = torch.nn.Module()
            layer.weight = torch.nn.Parameter(weight, requires_grad=False)
            self._dispatch(layer, remove_weight=False)
            self._layers[weight.data_ptr()] = layer
        flat = x.reshape(-1, x.shape[-1])
        return layer.cpu_linear(flat, layer.weight, None).view(*x.shape[:-1], weight.shape[0])


def gemm_for(device: str, engine: bool) -> tuple[Gemm, str]:
    """The GEMM a calibration on ``device`` times, and its name for meta.yaml: on the CPU with
    ``engine`` (vLLM installed, the process in its environment), the engine's (``EngineGemm``);
    otherwise ``F.linear``."""
    if device == "cpu" and engine:
        gemm = EngineGemm()
        return gemm, gemm.name
    return F.linear, "torch F.linear"
