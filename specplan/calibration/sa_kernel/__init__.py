"""A GPU suffix-automaton drafting kernel with TensorRT-LLM's work shape, to calibrate SA drafting cost.

- :mod:`.automaton`: the flat per-slot layout and its host build (numpy only).
- :mod:`.kernels`: the Triton kernels (extend + longest / n-gram lookup + draft; global-pool search).
- :mod:`.slots`: :class:`~.slots.SAKernelPool`, device slots and the (graph-capturable) launches.
- :mod:`.bench`: :func:`~.bench.bench_sa_kernel`, CUDA-graph timings over batch, accepted tokens, K,
  automaton size and active slots, plus host build + copy against prompt length.

Nothing is imported here, so the host build works without torch or triton installed.
"""
