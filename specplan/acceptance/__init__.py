"""What gets accepted: the oracle interface, parametric and recorded oracles, the SA enhancer and the
exact model-free drafters.

- ``oracles``: ``AcceptanceOracle`` (the interface the executor calls) and the parametric oracles
  (alpha, per-position conditional rates, acceptance-length distribution).
- ``recorded``: acceptance replayed from a recorded per-step log (acceptance mode ``recorded``).
- ``drafters``: the exact drafters replayed on real token histories (acceptance mode ``drafter``).
- ``enhancer``: TensorRT-LLM's SA enhancer over a model-based drafter (``sa_config``).
- ``factory.build_oracle``: the one entry point the simulator calls.
"""

from specplan.acceptance.factory import build_oracle
from specplan.acceptance.oracles import AcceptanceOracle

__all__ = ["AcceptanceOracle", "build_oracle"]
