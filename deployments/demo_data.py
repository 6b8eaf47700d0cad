"""The two labs of the seed write-ups as offline demo hosts with their histories, in order.

Knob values are the ones the documents state; anything they leave out is left out here.
"""

from __future__ import annotations

from typing import Any

LAB1 = "demo-6x3090"
LAB2 = "demo-2x5060ti"

DEMO_HOSTS: list[dict[str, Any]] = [
    {
        "name": LAB1,
        "address": "192.0.2.10",
        "gpus": [("RTX 3090", 6)],
        "revisions": [
            {
                "engine": "vllm",
                "engine_version": "0.17.1",
                "model": "Qwen3.5-27B",
                "port": 8001,
                "knobs": {"tensor_parallel_size": 4, "gpu_memory_utilization": 0.80},
                "env": {"CUDA_VISIBLE_DEVICES": "1,2,3,4"},
                "message": "Qwen3.5-27B BF16 on vLLM with TP=4\n\n24 attention heads and hidden size 5120 do "
                "not divide by 6, so TP=6 is impossible and 2 GPUs stay idle. The default 90% GPU memory "
                "utilisation OOMed during KV cache profiling; 80% leaves headroom. GPU 0 stays with the "
                "llama.cpp server on port 8000. Needs transformers 5.3.0. ~23 tok/s, ~1100 W.",
            },
            {
                "engine": "vllm",
                "engine_version": "0.17.1",
                "model": "Qwen3.5-35B-A3B",
                "port": 8001,
                "knobs": {"tensor_parallel_size": 4, "gpu_memory_utilization": 0.80, "max_num_seqs": 32},
                "env": {"CUDA_VISIBLE_DEVICES": "1,2,3,4"},
                "message": "Qwen3.5-35B-A3B (MoE) on vLLM, TP=4\n\nThe default 2048 sequences caused a CUDA "
                "graph OOM: max-num-seqs 32 shrinks the recurrent state buffers. Dropped --enforce-eager "
                "(it disabled FlashInfer: 15 -> 23 tok/s). Fused MoE kernel config tuned for the RTX 3090. "
                "~750 W at similar throughput.",
            },
            {
                "engine": "llama.cpp",
                "engine_version": "",
                "model": "Qwen3.5-122B-A10B-Q6_K_XL",
                "port": 8000,
                "tag": "daily-driver",
                "knobs": {
                    "n_gpu_layers": 999,
                    "ctx_size": 262144,
                    "cache_type_k": "q8_0",
                    "cache_type_v": "q8_0",
                    "flash_attn": "on",
                    "jinja": True,
                    "split_mode": "layer",
                },
                "env": {},
                "message": "Qwen3.5-122B-A10B Q6_K_XL on llama.cpp across all six GPUs\n\nLayer split "
                "uses every GPU whatever the head count (100% of the hardware vs 67% with vLLM). All layers "
                "offloaded, full native 262K context, q8_0 KV (built with GGML_CUDA_FA_ALL_QUANTS=ON), "
                "GPU 0 derated for the desktop, native chat template, --mmproj for vision. ~48 tok/s, ~920 W.",
            },
        ],
    },
    {
        "name": LAB2,
        "address": "192.0.2.20",
        "gpus": [("RTX 5060 Ti 16GB", 2)],
        "revisions": [
            {
                "engine": "vllm",
                "engine_version": "",
                "model": "Qwen3-32B-AWQ",
                "port": 8001,
                "tag": "vllm_Qwen3-32B-AWQ",
                "knobs": {"tensor_parallel_size": 2},
                "env": {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_P2P_DISABLE": "1"},
                "message": "Serve Qwen3-32B-AWQ with vLLM on both RTX 5060 Ti",
            },
            {
                "engine": "vllm",
                "engine_version": "",
                "model": "Qwen3.6-35B-A3B-AWQ-4bit",
                "port": 8001,
                "tag": "vllm_Qwen3.6-35B-A3B-AWQ-4bit",
                "knobs": {
                    "tensor_parallel_size": 2,
                    "quantization": "awq_marlin",
                    "max_model_len": 65536,
                    "max_num_seqs": 8,
                    "kv_cache_dtype": "fp8",
                    "gpu_memory_utilization": 0.95,
                    "enable_auto_tool_choice": True,
                    "tool_call_parser": "qwen3_coder",
                    "reasoning_parser": "qwen3",
                },
                "env": {
                    "CUDA_VISIBLE_DEVICES": "0,1",
                    "NCCL_P2P_DISABLE": "1",
                    "VLLM_USE_FLASHINFER_SAMPLER": "0",
                },
                "message": "feat: switch to Qwen3.6-35B-A3B-AWQ-4bit (66ed291)\n\nHybrid MoE, 3B active. "
                "Served at 65,536 context: the ~20 GB weights leave ~12 GB of KV, 1-2 full-length "
                "sequences at fp8.",
            },
            {
                "engine": "vllm",
                "engine_version": "0.22.0",
                "model": "Qwen3.8-27B-W4A16-AWQ",
                "port": 8001,
                "served_name": "Qwen3.8-27B-W4A16-AWQ",
                "tag": "vllm_Qwen3.8-27B-W4A16-AWQ",
                "knobs": {
                    "tensor_parallel_size": 2,
                    "max_model_len": 262144,
                    "max_num_seqs": 4,
                    "max_num_batched_tokens": 4096,
                    "gpu_memory_utilization": 0.95,
                    "kv_cache_dtype": "fp8",
                    "enforce_eager": True,
                    "enable_prefix_caching": True,
                    "enable_chunked_prefill": True,
                    "enable_auto_tool_choice": True,
                    "tool_call_parser": "qwen3_coder",
                    "reasoning_parser": "qwen3",
                    "attention_backend": "TRITON_ATTN",
                },
                "env": {
                    "CUDA_VISIBLE_DEVICES": "0,1",
                    "NCCL_P2P_DISABLE": "1",
                    "VLLM_USE_FLASHINFER_SAMPLER": "0",
                },
                "message": "Upgrade to Qwen3.8-27B W4A16 at the full 262,144 context\n\nDense 27B, all "
                "active: slower decode, far better agentic scores. Quantization auto-detected "
                "(compressed-tensors; awq_marlin would break loading), max_num_seqs 8 -> 4, vLLM >= 0.17, "
                "fp8 KV; the pool backs four saturated 262K sequences. Blackwell sm_120: TRITON_ATTN, "
                "FlashInfer sampler off, eager mode (CUDA graphs + hybrid + PCIe TP deadlocked), "
                "NCCL_P2P_DISABLE=1. MTP ships disabled (its head costs ~0.85 GiB).",
            },
        ],
    },
]
