vllm serve zai-org/GLM-4.7-FP8 \
  "--gpu-memory-utilization=0.9" \
  "--tensor-parallel-size=8" \
  "--max-num-batched-tokens=65536" \
  "--max-num-seqs=512" \
  "--enable-auto-tool-choice" \
  "--tool-call-parser=glm47" \
  "--reasoning-parser=glm45" \
  "--speculative-config.method=mtp" \
  "--speculative-config.num_speculative_tokens=1" \
  "--served-model-name=glm-4.7-fp8" \
  "--enable-expert-parallel"
