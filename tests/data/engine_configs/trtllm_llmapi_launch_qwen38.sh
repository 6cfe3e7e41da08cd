trtllm-llmapi-launch trtllm-serve /path/to/Qwen3.8-Flash-Next \
  --config bf16-tep2-mtp3.yaml \
  --served_model_name Qwen3.8-Flash-Next \
  --host 0.0.0.0 --port 8000 \
  --generation-config trtllm --no-telemetry
