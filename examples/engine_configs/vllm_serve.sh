# A vLLM server command line: specplan config import examples/engine_configs/vllm_serve.sh
vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 32 \
  --max-num-batched-tokens 2048 --enable-chunked-prefill --gpu-memory-utilization 0.9 \
  --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 1}'
