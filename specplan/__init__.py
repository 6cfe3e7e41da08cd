"""specplan: a discrete-event simulator of model-free speculative decoding in LLM serving engines.

Data flows one way: ``workloads`` produce requests, ``acceptance`` decides what is accepted,
``cost_models`` price each step, ``simulator`` runs the executor timeline, ``sweeps`` fan runs
out and ``reports`` draw them. ``calibration`` measures a device (torch) and writes the profiles
that ``cost_models`` read.
"""

__version__ = "0.1.0"
