"""One run: the SimPy executor loop, its scheduler and KV blocks, the control plane, metrics."""
