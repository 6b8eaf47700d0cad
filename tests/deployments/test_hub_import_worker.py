"""The attack: a model hub that answers one byte every 2 s, imported from the import page. The
web request answers at once (the import's page); the panel's real Celery worker reads the hub, ends
the import at the request deadline and the page then says why. With a hub that answers, the same
worker imports the entry. The hub is the local one (tests/support/fake_hub.py), a real HTTP server
the worker reaches through HF_ENDPOINT."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from deployments.models import HubImport, ModelVariant
from tests.support.fake_hub import FakeHub
from tests.support.panel_worker import PanelWorker
from tests.support.receivers import wait_for

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
DEADLINE_S = 3


@pytest.fixture
def hub() -> Any:
    hub = FakeHub().start()
    hub.add_repo("Qwen/Qwen3-32B-AWQ", {"config.json": (CONFIGS / "qwen3-32b-awq.json").read_bytes()})
    yield hub
    hub.stop()


@pytest.fixture
def worker(hub: FakeHub, tmp_path: Path, settings: Any) -> Any:
    queue = f"hub-import-test-{uuid.uuid4().hex[:8]}"
    env = {"HF_ENDPOINT": hub.url, "CONTROLPANEL_HUB_REQUEST_DEADLINE_S": str(DEADLINE_S)}
    panel_worker = PanelWorker(queue, tmp_path / "worker.log", concurrency=1, extra_env=env).start()
    settings.HUB_IMPORT_QUEUE = queue
    yield panel_worker
    panel_worker.stop()


def _ended(job_id: Any) -> HubImport | None:
    job = HubImport.objects.get(pk=job_id)
    return None if job.is_active else job


def test_a_dripping_hub_never_holds_the_web_request(hub, worker, client, operator):
    hub.drip = {"/api/models/": 2.0}  # the model info, a byte every 2 s
    hub.drip_limit_s = 40  # the drip alone would go on far past the deadline
    client.force_login(operator)
    assert client.get(reverse("deployments:model_import")).status_code == 200  # the page as the person sees it first

    started = time.monotonic()
    answer = client.post(reverse("deployments:model_import"), {"source": "hub", "hub-repo_id": "Qwen/Qwen3-32B-AWQ"})
    took = time.monotonic() - started
    assert answer.status_code == 302 and took < DEADLINE_S / 2, took  # at once: not after the drip nor the deadline
    job = HubImport.objects.get()
    assert answer.url == reverse("deployments:hub_import", args=[job.pk])
    page = client.get(answer.url).content.decode()
    assert "Qwen/Qwen3-32B-AWQ" in page and 'hx-trigger="every 1s"' in page

    # The worker took it and is held by the drip, not the web.
    wait_for(lambda: hub.requests, 30, "the worker to reach the hub")
    ended = wait_for(lambda: _ended(job.pk), DEADLINE_S + 15, "the import to end at the deadline")
    assert ended.state == "failed" and not ModelVariant.objects.filter(repo_id="Qwen/Qwen3-32B-AWQ").exists()
    assert ended.finished_at is not None and ended.started_at is not None
    assert (ended.finished_at - ended.started_at).total_seconds() < DEADLINE_S + 3
    page = client.get(answer.url).content.decode()
    assert "did not finish answering" in page and f"within {DEADLINE_S} s" in page and "hx-trigger" not in page
    wait_for(lambda: hub.dripped, 15, "the hub to see the worker hang up")
    assert hub.dripped[0]["ended"] == "client left"

    # The hub answers again: the same page flow imports the entry.
    hub.drip = {}
    again = client.post(reverse("deployments:model_import"), {"source": "hub", "hub-repo_id": "Qwen/Qwen3-32B-AWQ"})
    job = HubImport.objects.exclude(pk=job.pk).get()
    done = wait_for(lambda: _ended(job.pk), 30, "the second import")
    assert done.state == "succeeded", done.errors
    assert done.variant == ModelVariant.objects.get(repo_id="Qwen/Qwen3-32B-AWQ")
    assert f"Imported <strong>{done.variant.name}</strong>" in client.get(again.url).content.decode()
