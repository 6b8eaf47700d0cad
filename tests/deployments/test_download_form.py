"""The host's model download form says why it offers nothing: no catalog model the panel can
download (the starter catalog has no commits or files: import one by repository id), every one
already on the host, or a host without model folders (CONTROLPANEL_MODEL_DIRS)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from deployments.models import HostModel, ModelVariant
from tests.hardware.factories import HostFactory

pytestmark = pytest.mark.django_db


def _options(page: str) -> list[str]:
    select = re.search(r'<select name="model"[^>]*>(.*?)</select>', page, re.S)
    assert select, page
    return [o for o in re.findall(r'<option value="(\d*)"', select.group(1)) if o]


def test_an_empty_list_says_why_and_how_to_fix_it(client, catalog, operator):
    host = HostFactory(name="box", model_dirs=["/srv/models"])
    client.force_login(operator)
    url = reverse("deployments:host_models", args=["box"])
    page = client.get(url).content.decode()
    assert _options(page) == []  # the starter catalog: no model with a commit and files
    assert "No catalog model can be downloaded yet" in page and "Import one by repository id" in page

    variant = ModelVariant.objects.create(
        name="tiny-gguf",
        format="gguf",
        repo_id="org/tiny-GGUF",
        revision="a" * 40,
        hub_files=[{"name": "tiny.gguf", "size": 1}],
        gguf_file="tiny.gguf",
    )
    page = client.get(url).content.decode()
    assert _options(page) == [str(variant.pk)] and "No catalog model" not in page

    HostModel.objects.create(host=host, model_variant=variant, path="/srv/models/hub/tiny", size_bytes=1)
    page = client.get(url).content.decode()
    assert _options(page) == [] and "Every model the panel can download is already on box" in page


def test_a_host_without_model_folders_is_told_where_downloads_would_go(client, catalog, operator):
    HostFactory(name="bare", model_dirs=[])
    client.force_login(operator)
    page = client.get(reverse("deployments:host_models", args=["bare"])).content.decode()
    assert "bare reports no model folders" in page and "CONTROLPANEL_MODEL_DIRS" in page
