EXTRA_LLM_API_FILE=/tmp/config.yml

trtllm-serve nvidia/Llama-3.3-70B-Instruct-FP8 \
    --host 0.0.0.0 \
    --port 8000 \
    --max_batch_size 1024 \
    --max_num_tokens 2048 \
    --max_seq_len 2048 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --tp_size 1 \
    --ep_size 1 \
    --trust_remote_code \
    --extra_llm_api_options ${EXTRA_LLM_API_FILE}
