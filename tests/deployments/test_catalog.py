from __future__ import annotations

import pytest

from deployments.models import ModelVariant
from deployments.services.catalog import catalog_load
from hardware.models import GpuType

pytestmark = pytest.mark.django_db


def test_catalog_has_the_seed_models_with_their_stated_facts(catalog):
    new = ModelVariant.objects.get(name="Qwen3.8-27B-W4A16-AWQ")
    assert new.repo_id == "philbert440/Qwen3.8-27B-W4A16-AWQ"
    assert new.quant_method == "compressed-tensors"
    assert new.weights_bytes == 19_500_000_000
    arch = new.model_arch
    assert (arch.num_layers, arch.linear_attention_layers, arch.full_attention_layers) == (64, 48, 16)
    assert arch.num_kv_heads == 4
    assert arch.native_context == 262144
    assert arch.has_vision and arch.has_mtp
    assert new.tool_call_parser == "qwen3_coder" and new.reasoning_parser == "qwen3"
    assert new.min_engine_versions == {"vllm": "0.17"}

    old = ModelVariant.objects.get(name="Qwen3.6-35B-A3B-AWQ-4bit")
    assert old.model_arch.num_experts == 256
    assert (old.model_arch.params_total, old.model_arch.params_active) == (35_000_000_000, 3_000_000_000)
    assert (old.model_arch.linear_attention_layers, old.model_arch.full_attention_layers) == (30, 10)

    dense = ModelVariant.objects.get(name="Qwen3.5-27B")
    assert (dense.model_arch.hidden_size, dense.model_arch.num_attention_heads) == (5120, 24)
    # The write-up never states the layer count; the model's config.json does, and the source says so.
    assert (dense.model_arch.num_layers, dense.model_arch.num_kv_heads, dense.model_arch.head_dim) == (64, 4, 256)
    assert "config.json" in dense.source

    big = ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL")
    assert big.format == "gguf" and big.mmproj_file and big.model_arch.native_context == 262144


def test_catalog_has_home_lab_gpus_with_p2p_facts(catalog):
    names = set(GpuType.objects.values_list("short_name", flat=True))
    assert {
        "RTX 3090",
        "RTX 4090",
        "RTX 5060 Ti 16GB",
        "RTX 5090",
        "A100 40GB",
        "A100 80GB",
        "H100 80GB",
        "H200",
        "L40S",
    } <= names
    rtx = GpuType.objects.get(short_name="RTX 5060 Ti 16GB")
    assert rtx.compute_capability == "12.0" and rtx.pcie_p2p is False
    assert GpuType.objects.get(short_name="RTX 3090").pcie_p2p is False
    assert GpuType.objects.get(short_name="H100 80GB").nvlink is True


def test_loading_twice_adds_nothing(catalog):
    assert catalog_load() == {"gpu_types": 0, "model_variants": 0}
    assert ModelVariant.objects.count() == 6
