"""The vision.no_mmproj finding judges the launch the page shows: a vision GGUF whose projector the
launch adds (--mmproj from the model's mmproj file) gets no "without --mmproj" warning beside it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from deployments.models import ModelVariant
from deployments.planning import plan_for_values
from hardware.models import Host

pytestmark = pytest.mark.django_db

ARCH = {"num_layers": 4, "full_attention_layers": 4, "num_attention_heads": 4, "num_kv_heads": 2, "head_dim": 64,
        "has_vision": True}  # fmt: skip


def _variant(mmproj: str) -> ModelVariant:
    return ModelVariant.objects.create(
        name=f"vl-{mmproj or 'none'}", format="gguf", gguf_file="vl.gguf", mmproj_file=mmproj,
        weights_bytes=1 << 30, arch=ARCH,
    )  # fmt: skip


def _preview(client, host: Host, variant: ModelVariant, knobs: str = "ctx_size=4096") -> str:
    values = {"model_variant": variant.pk, "engine": "llama.cpp", "knobs": knobs, "served_name": "vl", "port": "8080"}
    url = reverse("deployments:revision_preview", args=[host.name])
    return client.post(url, values, HTTP_HX_REQUEST="true").content.decode()


def _command(body: str) -> str:
    return body.split('<pre class="argv">', 1)[1].split("</pre>", 1)[0]


def test_a_command_with_mmproj_gets_no_missing_mmproj_warning(client, viewer) -> None:
    host = Host.objects.create(name="cpu-vl", ram_bytes=64 << 30)
    client.force_login(viewer)
    body = _preview(client, host, _variant("mmproj-BF16.gguf"))
    assert "--mmproj mmproj-BF16.gguf" in _command(body)  # the command line shows the projector...
    assert "vision.no_mmproj" not in body  # ...so the planner does not say it is missing

    without = _preview(client, host, _variant(""))
    assert "--mmproj" not in _command(without) and "vision.no_mmproj" in without  # still said when it is missing
    off = _preview(client, host, _variant("mmproj2.gguf"), "ctx_size=4096\nvision=false")
    assert "--mmproj" not in _command(off) and "vision.no_mmproj" not in off  # vision turned off: nothing to warn


def test_the_revision_page_planner_reads_the_same_launch(db) -> None:
    host = Host.objects.create(name="cpu-vl2", ram_bytes=64 << 30)
    report = plan_for_values(host=host, model=_variant("mmproj-F16.gguf"), engine="llama.cpp", knobs={"ctx_size": 4096})
    assert "vision.no_mmproj" not in report.codes()
