"""The dashboard's first steps for a new panel: each marked done from what is recorded, gone
once a real host serves a revision (demo hosts do not count)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.utils import timezone

from deployments.services.demo import demo_load
from deployments.services.imports import model_variant_import_gguf
from deployments.services.revisions import revision_mark_active
from hardware.models import Host
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db


def _steps(client) -> str:
    page = client.get("/").content.decode()
    start = page.find('class="card first-steps"')
    return page[start : page.find("</section>", start)] if start >= 0 else ""


def test_steps_follow_the_new_users_progress_and_leave_when_a_model_serves(client, catalog, operator):
    from tests.support.llama import gemma_model_path

    client.force_login(operator)
    demo_load()  # demo hosts serve revisions, but they are not this user's
    assert _steps(client) == ""  # no real host yet: nothing to guide towards
    folder = str(Path(gemma_model_path()).parent)
    host = Host.objects.create(name="box", last_heartbeat=timezone.now(), model_dirs=[folder])
    steps = _steps(client)
    assert steps.count("<li") == 4 and "badge ok" not in steps
    assert 'href="/hosts/box/#host-engines"' in steps and f"Put a GGUF file in {folder}" in steps

    host.engine_installs = {"llama.cpp": {"b6500": {"path": "/srv/venvs/llama.cpp-b6500"}}}
    host.save(update_fields=["engine_installs"])
    model = model_variant_import_gguf(path=gemma_model_path(), name="gemma", actor=operator)
    steps = _steps(client)
    assert steps.count("badge ok") == 2 and 'href="/hosts/box/revisions/new/"' in steps

    revision = make_revision(
        host=host, engine="llama.cpp", model_variant=model, knobs={"ctx_size": 2048}, message="first", actor=operator
    )
    assert _steps(client).count("badge ok") == 3
    revision_mark_active(revision=revision, actor=operator)
    assert _steps(client) == ""


def test_a_viewer_sees_the_steps_without_links(client, viewer):
    Host.objects.create(name="box", last_heartbeat=timezone.now())
    client.force_login(viewer)
    steps = _steps(client)
    assert steps.count("<li") == 4 and "href=" not in steps
