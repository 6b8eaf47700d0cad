"""The starter catalog: GPU types people run at home and in small labs, and the model
variants the two seed write-ups (shared/seeds) name, with exactly the facts they state.

Unknown facts stay None. Each variant's `source` says where its facts come from; a fact
derived by arithmetic from stated figures says so.
"""

from __future__ import annotations

from typing import Any

MIB = 1024**2
GIB = 1024**3
GB = 1000**3

# An A100 SXM4 board, whichever its memory.
_A100_SXM4: dict[str, Any] = {
    "compute_capability": "8.0",
    "architecture": "Ampere",
    "is_geforce": False,
    "pcie_p2p": True,
    "nvlink": True,
    "tdp_w": 400,
    "notes": "SXM4 boards have NVLink; PCIe cards need a bridge.",
}
# A Hopper board with NVLink (H100 SXM5, H200).
_HOPPER: dict[str, Any] = {
    "compute_capability": "9.0",
    "architecture": "Hopper",
    "is_geforce": False,
    "pcie_p2p": True,
    "nvlink": True,
    "tdp_w": 700,
}

# Memory is what NVML reports as total (MiB as nvidia-smi prints it), not the box's marketing GB;
# the H200 figure is the real probe in shared/reference/recordings/h200-nvml-probe.json.
GPU_TYPES: list[dict[str, Any]] = [
    {
        "short_name": "RTX 3090",
        "name": "NVIDIA GeForce RTX 3090",
        "memory_bytes": 24576 * MIB,
        "compute_capability": "8.6",
        "architecture": "Ampere",
        "is_geforce": True,
        "pcie_p2p": False,
        "nvlink": True,
        "tdp_w": 350,
        "notes": "GeForce: no PCIe P2P. A 2-way NVLink bridge exists; larger groups talk over PCIe.",
    },
    {
        "short_name": "RTX 4090",
        "name": "NVIDIA GeForce RTX 4090",
        "memory_bytes": 24564 * MIB,
        "compute_capability": "8.9",
        "architecture": "Ada Lovelace",
        "is_geforce": True,
        "pcie_p2p": False,
        "nvlink": False,
        "tdp_w": 450,
        "notes": "GeForce: no PCIe P2P, no NVLink.",
    },
    {
        "short_name": "RTX 5060 Ti 16GB",
        "name": "NVIDIA GeForce RTX 5060 Ti",
        "memory_bytes": 16311 * MIB,
        "compute_capability": "12.0",
        "architecture": "Blackwell",
        "is_geforce": True,
        "pcie_p2p": False,
        "nvlink": False,
        "tdp_w": 180,
        "notes": "sm_120: FLASH_ATTN and FlashInfer broken in vLLM (seed 2); use TRITON_ATTN. No P2P.",
    },
    {
        "short_name": "RTX 5090",
        "name": "NVIDIA GeForce RTX 5090",
        "memory_bytes": 32607 * MIB,
        "compute_capability": "12.0",
        "architecture": "Blackwell",
        "is_geforce": True,
        "pcie_p2p": False,
        "nvlink": False,
        "tdp_w": 575,
        "notes": "sm_120, like the 5060 Ti. No P2P, no NVLink.",
    },
    {
        "short_name": "L40S",
        "name": "NVIDIA L40S",
        "memory_bytes": 46068 * MIB,
        "compute_capability": "8.9",
        "architecture": "Ada Lovelace",
        "is_geforce": False,
        "pcie_p2p": True,
        "nvlink": False,
        "tdp_w": 350,
        "notes": "Data-centre PCIe card without NVLink.",
    },
    {
        "short_name": "A100 40GB",
        "name": "NVIDIA A100-SXM4-40GB",
        "memory_bytes": 40960 * MIB,
        **_A100_SXM4,
    },
    {
        "short_name": "A100 80GB",
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_bytes": 81920 * MIB,
        **_A100_SXM4,
    },
    {
        "short_name": "H100 80GB",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_bytes": 81559 * MIB,
        **_HOPPER,
        "notes": "SXM5 boards have NVLink; H100 PCIe needs a bridge.",
    },
    {
        "short_name": "H200",
        "name": "NVIDIA H200",
        "memory_bytes": 150754820096,
        **_HOPPER,
        "notes": "Memory and power limit as probed on a real H200 (shared/reference/recordings).",
    },
]

SEED1 = "shared/seeds/000 (6 x RTX 3090 lab write-up)"
SEED2 = "shared/seeds/002 (2 x RTX 5060 Ti lab write-up)"


def _qwen35(family: str, *, layers: int, **shape: int | str) -> dict[str, Any]:
    """The architecture of a Qwen3.5-generation model (3.5, 3.6 and 3.8 share it, as their
    config.json files say): every fourth layer full attention and the rest Gated DeltaNet (16 key
    heads of 128, value heads of 128, a conv of 4); attention heads of 256, a vocabulary of
    248,320, 262,144 native positions, vision. `shape` gives the model's own sizes."""
    return {
        "family": family,
        "num_layers": layers,
        "full_attention_layers": layers // 4,
        "linear_attention_layers": layers - layers // 4,
        "head_dim": 256,
        "vocab_size": 248320,
        "linear_num_key_heads": 16,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "native_context": 262144,
        "has_vision": True,
        **shape,
    }


# What every Qwen3.5-generation model is served with (seed 2: Qwen3.5 and later take the
# qwen3_coder tool parser and `--reasoning-parser qwen3`; they think unless told not to).
QWEN35_CHAT: dict[str, Any] = {"tool_call_parser": "qwen3_coder", "reasoning_parser": "qwen3", "thinking": True}

# Qwen3.5-27B's shape, which Qwen3.8-27B keeps (its config differs only in transformers_version).
_DENSE_27B: dict[str, Any] = {
    "params_total": 27_000_000_000,
    "params_active": 27_000_000_000,
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "num_attention_heads": 24,
    "num_kv_heads": 4,
    "linear_num_value_heads": 48,
    "has_mtp": True,
    "mtp_num_layers": 1,
}
# Qwen3.5-35B-A3B's shape, which Qwen3.6-35B-A3B keeps.
_MOE_35B_A3B: dict[str, Any] = {
    "params_total": 35_000_000_000,
    "params_active": 3_000_000_000,
    "hidden_size": 2048,
    "moe_intermediate_size": 512,
    "num_attention_heads": 16,
    "num_kv_heads": 2,
    "num_experts": 256,
    "experts_per_token": 8,
    "linear_num_value_heads": 32,
}


def _qwen35_bf16(name: str, *, weights_gb: int, arch: dict[str, Any], source: str) -> dict[str, Any]:
    """One of Qwen's own BF16 releases of a Qwen3.5 model (`Qwen/<name>` on the hub); vLLM serves
    them from 0.17 (seed 1: 0.17.1 with transformers 5.3.0)."""
    return {
        "name": name,
        "repo_id": f"Qwen/{name}",
        "family": "Qwen3.5",
        "generation": "Qwen3.5",
        "format": "hf",
        "quantization": "bf16",
        "weights_bytes": weights_gb * GB,
        "arch": arch,
        "min_engine_versions": {"vllm": "0.17"},
        **QWEN35_CHAT,
        "source": source,
    }


MODEL_VARIANTS: list[dict[str, Any]] = [
    _qwen35_bf16(
        "Qwen3.5-27B",
        weights_gb=56,
        arch=_qwen35("Qwen3.5", layers=64, **_DENSE_27B, torch_dtype="bfloat16"),
        source=f"{SEED1}: BF16 ~56GB; hidden_size 5120, 24 attention heads (TP=6 impossible, TP=4 only); "
        "vision input; vLLM 0.17.1 needs transformers 5.3.0. Parsers: seed 2 (Qwen3.5+ uses qwen3_coder; "
        "--reasoning-parser qwen3). Architecture from Qwen/Qwen3.5-27B's config.json (text_config) as public code "
        "reproduces it (THUDM/slime scripts/models/qwen3.5-27B.sh: 64 layers, 24 heads, 4 KV groups of 256, "
        "hidden 5120, FFN 17408, vocab 248320; a Qwen3.5 dense text_config copied into public tests: "
        "full_attention_interval 4 = 16 full + 48 Gated DeltaNet layers, 16 key / 48 value heads of 128, conv 4, "
        "1 MTP layer); native 262,144 (max_position_embeddings; xinference's qwen3.5 model page).",
    ),
    _qwen35_bf16(
        "Qwen3.5-35B-A3B",
        weights_gb=70,
        arch=_qwen35("Qwen3.5", layers=40, **_MOE_35B_A3B, torch_dtype="bfloat16"),
        source=f"{SEED1}: MoE, BF16 ~70GB on 4 GPUs; needed max-num-seqs 32 (CUDA graph OOM at the "
        "default); --enforce-eager dropped 23 to 15 tok/s; ~750 W. Active 3B from the A3B name. Architecture "
        "from the qwen3_5_moe config.json (text_config) as public code checks it: 40 layers (3 Gated DeltaNet : 1 "
        "full attention = 30 + 10), hidden 2048, 16 heads, 2 KV heads of 256, 256 experts, 8 per token, expert "
        "FFN 512, vocab 248320, DeltaNet 16 key / 32 value heads of 128, conv 4, max_position_embeddings 262,144.",
    ),
    {
        "name": "Qwen3.5-122B-A10B-Q6_K_XL",
        "family": "Qwen3.5",
        "generation": "Qwen3.5",
        "format": "gguf",
        "quantization": "Q6_K_XL",
        "gguf_file": "Qwen3.5-122B-A10B-UD-Q6_K_XL.gguf",
        "weights_bytes": 105 * GB,
        "mmproj_file": "mmproj-BF16.gguf",
        "arch": _qwen35(
            "Qwen3.5",
            layers=48,
            params_total=122_000_000_000,
            params_active=10_000_000_000,
            hidden_size=3072,
            num_attention_heads=32,
            num_kv_heads=2,
            num_experts=256,
            experts_per_token=8,
            linear_num_value_heads=64,
        ),
        "min_engine_versions": {},
        **QWEN35_CHAT,
        "source": f"{SEED1}: Q6_K_XL ~105GB on 6 GPUs via llama.cpp layer split, full native 262K context, "
        "q8_0 KV, mmproj BF16 871MB, ~48 tok/s, ~920 W. Architecture from Qwen/Qwen3.5-122B-A10B's config.json "
        "(text_config) as public code quotes it: 48 layers (every 4th full attention: 12 full + 36 Gated "
        "DeltaNet), hidden 3072, 32 heads, 2 KV heads of 256, 256 experts, 8 per token, vocab 248320, DeltaNet "
        "16 key / 64 value heads of 128, conv 4, 262,144 positions; it agrees with the real vLLM block_size (2096) "
        "error worked in shared/reference/engines.md section 4 (conv dim 12288 and 32 value heads per rank at TP=2, "
        "so 64 in all). Expert FFN width not found in a config read here: left out.",
    },
    {
        "name": "Qwen3-32B-AWQ",
        "repo_id": "Qwen/Qwen3-32B-AWQ",
        "family": "Qwen3",
        "generation": "Qwen3",
        "format": "hf",
        "quantization": "awq-int4",
        "quant_method": "awq",
        "quant_bits": 4,
        "arch": {
            "family": "Qwen3",
            "params_total": 32_000_000_000,
            "params_active": 32_000_000_000,
            "num_layers": 64,
            "full_attention_layers": 64,
            "hidden_size": 5120,
            "intermediate_size": 25600,
            "num_attention_heads": 64,
            "num_kv_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "native_context": 32768,
        },
        "tool_call_parser": "hermes",
        "source": f"{SEED2}: the lab's first model (git tag vllm_Qwen3-32B-AWQ); the hermes tool parser "
        "belongs to the older Qwen3 dense generation. Qwen's official AWQ repository; Qwen3 dense models "
        "are trained for 32,768 tokens (131,072 only with YaRN rope scaling; config.json says 40,960 positions). "
        "Architecture from Qwen3-32B's config.json as public code quotes it: 64 layers, hidden 5120, FFN 25600, "
        "64 heads, 8 KV heads of 128, vocab 151936; AWQ 4-bit (awq-int4). No weight size is recorded: the "
        "planner estimates it from the parameters and the 4 bits and says so.",
    },
    {
        "name": "Qwen3.6-35B-A3B-AWQ-4bit",
        "repo_id": "cyankiwi/Qwen3.6-35B-A3B-AWQ-4bit",
        "family": "Qwen3.5",
        "generation": "Qwen3.6",
        "format": "hf",
        "quantization": "awq-int4",
        "quant_method": "awq",
        "weights_bytes": 20 * GB,
        "arch": _qwen35("Qwen3.6", layers=40, **_MOE_35B_A3B, has_mtp=True, mtp_num_layers=1),
        "min_engine_versions": {},
        **QWEN35_CHAT,
        "source": f"{SEED2}: hybrid MoE, 40 layers (30 GDN + 10 full attention), 256 experts (8 routed + 1 "
        "shared active), 35B total / ~3B active, 2 KV heads, 262,144 native, vision, MTP head, AWQ INT4 "
        "(awq_marlin), ~20 GB, qwen3_coder. Head size and the rest from Qwen/Qwen3.6-35B-A3B's config.json "
        "(revision 995ad96) as a public converter pinned to it checks it: hidden 2048, 16 heads, 2 KV heads of 256, "
        "expert FFN 512, vocab 248320, DeltaNet 16 key / 32 value heads of 128, conv 4, 1 MTP layer.",
    },
    {
        "name": "Qwen3.8-27B-W4A16-AWQ",
        "repo_id": "philbert440/Qwen3.8-27B-W4A16-AWQ",
        "family": "Qwen3.5",
        "generation": "Qwen3.8",
        "format": "hf",
        "quantization": "w4a16",
        "quant_method": "compressed-tensors",
        "weights_bytes": int(19.5 * GB),
        "arch": _qwen35("Qwen3.8", layers=64, **_DENSE_27B),
        "min_engine_versions": {"vllm": "0.17"},
        **QWEN35_CHAT,
        "sampling_presets": {
            "thinking": {"temperature": 1.0, "top_p": 0.95, "top_k": 20},
            "non_thinking": {"temperature": 0.7, "top_p": 0.8, "presence_penalty": 1.5},
        },
        "source": f"{SEED2}: hybrid dense, 64 layers (48 GDN + 16 full attention), 27B all active, 4 KV "
        "heads, 262,144 native, vision, MTP head (~0.85 GiB BF16), compressed-tensors W4A16 auto-detected, "
        "19.5 GB, vLLM >= 0.17, qwen3_coder + reasoning parser qwen3, official sampling. Shapes from "
        "Qwen/Qwen3.8-27B's config.json (text_config) as public code transcribes it (the same as Qwen3.6-27B's "
        "but for transformers_version): 24 heads, 4 KV heads of head_dim 256, hidden 5120, FFN 17408, vocab "
        "248320, DeltaNet 16 key / 48 value heads of 128, conv 4, 1 MTP layer. The head_dim 128 once derived here "
        "from the seed's '~8 KiB per token per GPU at fp8, TP=2' contradicts the config: at 256 it is 16 KiB.",
    },
]
