"""Sizes on pages read in GiB/MiB, with the exact bytes in a title (the `size` filter), and the
switch preflight says sizes the same way: never a bare "51,832,042,176 bytes" and never Django's
filesizeformat, which labels GiB as "GB"."""

from __future__ import annotations

import re

import pytest

from deployments.models import ModelVariant
from tests.hardware.factories import GPUFactory, HostFactory

pytestmark = pytest.mark.django_db

SIZE = 51_832_042_176  # 48.27 GiB


def _sized(page: str, shown: str, exact: int) -> bool:
    return re.search(rf'<span class="size" title="{exact:,} bytes">{re.escape(shown)}</span>', page) is not None


def test_host_page_shows_ram_and_gpu_memory_in_gib_with_the_bytes_in_a_title(client, viewer):
    host = HostFactory(name="box", ram_bytes=SIZE)
    GPUFactory(host=host, index=0, memory_bytes=143_771_058_176)
    client.force_login(viewer)
    page = client.get("/hosts/box/").content.decode()
    assert _sized(page, "48.27 GiB", SIZE), page
    assert _sized(page, "133.9 GiB", 143_771_058_176)
    assert "48.3 GB" not in page and "133.9 GB" not in page


def test_model_list_shows_weights_in_gib_with_the_bytes_in_a_title(client, viewer):
    ModelVariant.objects.create(name="big-one", format="gguf", gguf_file="big.gguf", weights_bytes=SIZE)
    client.force_login(viewer)
    page = client.get("/models/").content.decode()
    assert _sized(page, "48.27 GiB", SIZE)
