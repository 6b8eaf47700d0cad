"""llama.cpp layouts as llama.cpp names them (--split-mode, --tensor-split, GPUs holding layers), never
TP x PP, and its context taken from ctx_size (serving.diffing.context.served_context) even when
the model's layer facts are missing."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.urls import reverse

from deployments.models import ModelVariant
from hardware.models import GPU, Host
from serving.arch import ModelArch
from serving.planner import PlanRequest, catalog_host, plan

GB = 10**9
NO_LAYER_FACTS = ModelArch(params_total=122_000_000_000, native_context=262144)  # a GGUF imported without facts


def _plan(knobs: dict, *, gpus: int = 6, arch: ModelArch = NO_LAYER_FACTS):
    return plan(
        PlanRequest(
            arch=arch, engine="llama.cpp", gpus=catalog_host("rtx3090", gpus), knobs=knobs, weights_bytes=105 * GB
        )
    )


def test_a_layer_split_is_described_as_llamacpp_has_it() -> None:
    report = _plan({"ctx_size": 65536})
    assert report.layout == "--split-mode layer over 6 of 6 GPUs, by free memory"
    assert "TP" not in report.to_dict()["layout"]
    shares = _plan({"ctx_size": 65536, "tensor_split": "3,1,0,0,0,0"})
    assert shares.layout == "--split-mode layer over 2 of 6 GPUs, --tensor-split 3,1,0,0,0,0"
    rows = _plan({"split_mode": "row", "n_gpu_layers": 40})  # 40 of an unknown number of layers
    assert rows.layout == "--split-mode row over the 6 GPUs, by free memory, -ngl 40"
    one = _plan({"split_mode": "none"}, gpus=2, arch=ModelArch(params_total=1_000_000))
    assert one.layout.startswith("--split-mode none: the whole model on one GPU (1 of 2 GPUs)")
    assert _plan({"n_gpu_layers": 0}).layout.startswith("CPU only (-ngl 0")


def test_the_context_comes_from_ctx_size_without_layer_facts() -> None:
    assert _plan({"ctx_size": 65536}).max_model_len == 65536
    # four slots, KV not unified: one request gets a quarter (what clients must be told)
    assert _plan({"ctx_size": 65536, "parallel": 4, "kv_unified": False}).max_model_len == 16384
    assert _plan({"ctx_size": 0}).max_model_len == 262144  # 0 = the model's trained context


def test_vllm_keeps_tensor_and_pipeline_parallel_words() -> None:
    arch = ModelArch(num_layers=4, num_kv_heads=2, head_dim=64, num_attention_heads=4, hidden_size=256)
    report = plan(
        PlanRequest(
            arch=arch,
            engine="vllm",
            gpus=catalog_host("rtx3090", 2),
            knobs={"tensor_parallel_size": 2},
            weights_bytes=GB,
        )
    )
    assert report.layout == "TP 2 × PP 1 on 2 of 2 GPUs"


@pytest.mark.django_db
def test_the_live_planner_and_plan_command_show_the_split_and_the_context(client, viewer, catalog) -> None:
    host = Host.objects.create(name="six", nvml_available=True)
    for i in range(6):
        GPU.objects.create(host=host, index=i, name="NVIDIA GeForce RTX 3090", memory_bytes=24576 << 20)
    variant = ModelVariant.objects.create(
        name="big-gguf", format="gguf", gguf_file="big.gguf", weights_bytes=105 * GB, arch=NO_LAYER_FACTS.to_dict()
    )
    client.force_login(viewer)
    values = {
        "model_variant": variant.pk,
        "engine": "llama.cpp",
        "knobs": "ctx_size=65536\ntensor_split=1,1,1,1,1,1",
        "served_name": "big",
        "port": "8080",
    }
    body = client.post(reverse("deployments:revision_preview", args=["six"]), values, HTTP_HX_REQUEST="true")
    text = body.content.decode()
    assert "--split-mode layer over 6 of 6 GPUs, --tensor-split 1,1,1,1,1,1" in text
    assert "TP 1 × PP 1" not in text
    assert "<tr><th>Context</th><td>65536 tokens</td></tr>" in text

    out = io.StringIO()
    call_command(  # no error finding: it exits 0
        "plan",
        *("--model", "big-gguf", "--gpu-type", "RTX 3090", "--gpu-count", "6", "--engine", "llama.cpp"),
        *("--set", "ctx_size=65536"),
        stdout=out,
        stderr=io.StringIO(),
    )
    first = out.getvalue().splitlines()[0]
    assert first.startswith("engine llama.cpp  --split-mode layer over 6 of 6 GPUs") and "TP=" not in first
    assert "context (one request):        65,536 tokens" in out.getvalue()
