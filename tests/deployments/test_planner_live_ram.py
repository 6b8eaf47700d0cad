"""The New revision form's live planner on a CPU-only host: it asks the switch preflight's own RAM
check (weights + KV cache against the host's RAM) as you type, and says "does not fit" with the figures."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from deployments.models import ModelVariant
from deployments.services.preflight import panel_preflight
from hardware.models import Host
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

RAM = 23_500_000_000  # the 23.5 GB CPU-only box of the report
# Qwen3-32B's shape (64 layers, 8 KV heads of 128): 262,144 bytes of f16 KV per token.
ARCH = {"num_layers": 64, "full_attention_layers": 64, "num_kv_heads": 8, "head_dim": 128, "hidden_size": 5120}


@pytest.fixture
def cpu_box(db: Any) -> Host:
    return Host.objects.create(name="cpu-box", ram_bytes=RAM)


@pytest.fixture
def gguf(db: Any) -> ModelVariant:
    return ModelVariant.objects.create(
        name="q32-q4", format="gguf", gguf_file="q32.gguf", weights_bytes=5_000_000_000, arch=ARCH
    )


def _preview(client: Any, host: Host, variant: ModelVariant, knobs: str) -> str:
    values = {"model_variant": variant.pk, "engine": "llama.cpp", "knobs": knobs, "served_name": "q", "port": "8080"}
    url = reverse("deployments:revision_preview", args=[host.name])
    response = client.post(url, values, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    return response.content.decode()


def test_a_kv_cache_larger_than_ram_does_not_fit_as_you_type(client, viewer, cpu_box, gguf) -> None:
    client.force_login(viewer)
    body = _preview(client, cpu_box, gguf, "ctx_size=196608\nparallel=1")
    assert "Does not fit in this host's RAM" in body
    # 196,608 tokens x 262,144 bytes = 48 GiB of KV cache, and llama.cpp's compute and output
    # buffers and runtime (the planner's CPU model); sizes as every page says them
    assert "weights 4.66 GiB + KV cache 48 GiB + buffers and runtime 468.49 MiB = 53.11 GiB" in body
    assert "more than its 21.89 GiB of RAM" in body
    assert "No findings: it fits." not in body


def test_what_fits_in_ram_says_so_with_the_figures(client, viewer, cpu_box, gguf) -> None:
    client.force_login(viewer)
    body = _preview(client, cpu_box, gguf, "ctx_size=8192\nparallel=1")
    assert "fits its 21.89 GiB of RAM" in body
    assert "Does not fit" not in body
    gpu_host = Host.objects.create(name="gpu-box", nvml_available=True, ram_bytes=RAM)  # the cache lives in VRAM
    assert "CPU-only host:" not in _preview(client, gpu_host, gguf, "ctx_size=196608\nparallel=1")


def test_the_live_planner_and_the_switch_preflight_say_the_same(client, viewer, operator, cpu_box, gguf) -> None:
    from deployments.planning import revision_plan

    revision = make_revision(
        host=cpu_box,
        engine="llama.cpp",
        engine_version="",
        model_variant=gguf,
        knobs={"ctx_size": 196608, "parallel": 1},
        message="too long a context",
        actor=operator,
    )
    memory = next(c for c in panel_preflight(revision, revision_plan(revision).checked()) if c.name == "memory")
    assert memory.status == "fail"
    client.force_login(viewer)
    body = _preview(client, cpu_box, gguf, "ctx_size=196608\nparallel=1")
    assert memory.message in body
