/usr/local/mpi/bin/mpirun -np 16 \
  --hostfile /workspace/torch_bench/my_hostfile \
  -mca plm_rsh_args "-p 12233" \
  --allow-run-as-root \
  trtllm-llmapi-launch trtllm-serve \
  --backend pytorch \
  --tp_size 16 \
  --ep_size 8 \
  --kv_cache_free_gpu_memory_fraction 0.95 \
  --trust_remote_code \
  --max_batch_size 128 \
  --max_num_tokens 4096 \
  --extra_llm_api_options extra-llm-api-config.yml \
  /raid/minih/hub/models--deepseek-ai--DeepSeek-R1/snapshots/8a58a132790c9935686eb97f042afa8013451c9f/
