"""The dashboard's poll at a hundred hosts: the page names the cards it shows and gets back only
those that changed, with a fixed number of queries; bench/bench_dashboard.py times it."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from deployments.models import Deployment, DeploymentRevision, ModelVariant, Operation
from hardware.models import GPU, GpuSample, Host

pytestmark = pytest.mark.django_db
HOSTS, GPUS = 100, 8
CARD = re.compile(r'data-host="([^"]+)" data-v="([^"]+)"')


@pytest.fixture
def fleet(catalog: None) -> list[Host]:
    """100 online hosts with 8 GPUs each, a sample per GPU, a serving revision, metrics, and a
    running operation on every tenth."""
    now = timezone.now()
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    Host.objects.bulk_create(
        [
            Host(
                name=f"node-{i:03d}",
                queue=f"host.node-{i:03d}",
                nvml_available=True,
                last_heartbeat=now,
                engine_state={"running": True, "health": "healthy", "engine": "vllm", "revision_label": "r1"},
                engine_metrics={"requests_running": i % 5, "requests_waiting": i % 3, "kv_cache_usage": 0.37},
            )
            for i in range(HOSTS)
        ]
    )
    hosts = list(Host.objects.order_by("name"))
    DeploymentRevision.objects.bulk_create(
        [DeploymentRevision(host=h, number=1, engine="vllm", model_variant=variant, knobs={}) for h in hosts]
    )
    revisions = {r.host_id: r for r in DeploymentRevision.objects.all()}
    Deployment.objects.bulk_create([Deployment(host=h, active_revision=revisions[h.pk]) for h in hosts])
    Operation.objects.bulk_create(
        [Operation(kind="switch", host=h, revision=revisions[h.pk], state="running") for h in hosts[::10]]
    )
    GPU.objects.bulk_create(
        [GPU(host=h, index=g, name="NVIDIA H200", memory_bytes=141 * 1024**3) for h in hosts for g in range(GPUS)]
    )
    new_round(list(GPU.objects.all()))
    return hosts


def new_round(gpus: list[GPU], util: float = 40.0) -> None:
    GpuSample.objects.bulk_create(
        [GpuSample(gpu=g, ts=timezone.now(), util_pct=util, mem_used_bytes=90 * 1024**3, power_w=500) for g in gpus]
    )


def poll(client: Client, page: str, shown: dict[str, str]) -> tuple[Any, int]:
    listed = re.search(r'data-hosts="([^"]+)"', page)
    assert listed is not None
    url = f"{reverse('dashboard:cards')}?hosts={listed.group(1)}&have={'.'.join(shown.values())}"
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    return response, len(queries.captured_queries)


def test_a_poll_gets_only_the_cards_that_changed_in_a_fixed_number_of_queries(
    client: Client, viewer: Any, fleet: list[Host]
) -> None:
    client.force_login(viewer)
    page = client.get(reverse("dashboard:index")).content.decode()
    shown = dict(CARD.findall(page))
    assert len(shown) == HOSTS and page.count('class="gpu"') == HOSTS * GPUS
    with CaptureQueriesContext(connection) as first:
        everything = client.get(reverse("dashboard:cards"), HTTP_HX_REQUEST="true")
    assert len(everything.content) > 300 * 1024  # every card: what the page polled every 5 s before

    # Nothing changed: nothing to send, no swap, and no card built: the database computes every
    # card's fingerprint in one query (after the session, the user and the roles), as every
    # card does once the cards' renderings are in the cache.
    response, queries = poll(client, page, shown)
    assert response.content == b"" and response["HX-Reswap"] == "none"
    assert queries == len(first.captured_queries) == 4

    # A telemetry round on 5 hosts' GPUs, one host's engine metrics and one going offline:
    # 7 cards, each swapped in by its id, well under 64 KiB.
    changed = fleet[3:8]
    new_round([g for h in changed for g in h.gpus.all()], util=97.0)
    Host.objects.filter(pk=fleet[20].pk).update(engine_metrics={"requests_running": 9, "kv_cache_usage": 0.9})
    Host.objects.filter(pk=fleet[30].pk).update(last_heartbeat=timezone.now() - timedelta(hours=1))
    response, queries = poll(client, page, shown)
    body = response.content.decode()
    sent = dict(CARD.findall(body))
    assert sorted(sent) == sorted([h.name for h in changed] + [fleet[20].name, fleet[30].name])
    assert body.count('hx-swap-oob="true"') == 7 and f'id="host-card-{fleet[3].name}"' in body
    assert "util 97%" in body and "running <strong>9</strong>" in body and ">offline<" in body
    # and the changed cards are built: their hosts with all their cards show and their
    # fingerprints in one query, their GPUs' latest samples in another
    assert len(response.content) <= 64 * 1024 and queries == 6
    shown.update(sent)

    # The page shows those now: the next poll is empty again.
    response, _ = poll(client, page, shown)
    assert response.content == b""


def test_a_host_that_came_or_went_sends_every_card_again(client: Client, viewer: Any, fleet: list[Host]) -> None:
    client.force_login(viewer)
    page = client.get(reverse("dashboard:index")).content.decode()
    shown = dict(CARD.findall(page))
    Host.objects.create(name="newcomer", queue="host.newcomer")
    response, _ = poll(client, page, shown)
    body = response.content.decode()
    assert "HX-Reswap" not in response and body.count("data-v=") == HOSTS + 1 and 'data-host="newcomer"' in body
    assert "hx-swap-oob" not in body  # the whole list replaces the poller's content


def test_a_poll_naming_garbage_gets_every_card(client: Client, viewer: Any, fleet: list[Host]) -> None:
    client.force_login(viewer)
    url = reverse("dashboard:cards")
    for query in ("?hosts=x&have=zz", "?hosts=&have=", "?have=" + "a" * 100_000):
        response = client.get(url + query, HTTP_HX_REQUEST="true")
        assert response.status_code == 200 and response.content.count(b"data-v=") == HOSTS


def test_the_table_view_polls_the_same_way_a_row_per_host(client: Client, viewer: Any, fleet: list[Host]) -> None:
    client.force_login(viewer)
    page = client.get(reverse("dashboard:index") + "?view=table").content.decode()
    rows = dict(CARD.findall(page))
    assert len(rows) == HOSTS and page.count('<tr id="host-row-') == HOSTS and "<article" not in page
    assert f'hx-get="{reverse("dashboard:cards")}?view=table"' in page  # the poll asks for rows
    assert "8× H200" in page and "util 40%" not in page  # the table's own columns, not the cards'

    listed = re.search(r'data-hosts="([^"]+)"', page)
    assert listed is not None
    url = f"{reverse('dashboard:cards')}?view=table&hosts={listed.group(1)}&have={'.'.join(rows.values())}"
    assert client.get(url, HTTP_HX_REQUEST="true").content == b""
    new_round([g for h in fleet[:5] for g in h.gpus.all()], util=97.0)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert sorted(dict(CARD.findall(body))) == [h.name for h in fleet[:5]]
    assert body.count('<tr id="host-row-') == 5 and body.count('hx-swap-oob="true"') == 5 and "97%" in body
    assert len(response.content) <= 16 * 1024 and len(queries.captured_queries) == 6


def test_every_card_and_row_of_a_hundred_hosts_stays_rendered(client: Client, viewer: Any, fleet: list[Host]) -> None:
    """Both views, whole and as swaps: 400 renderings, all kept (Django's default cache would
    cull a third of them at 300 and render them again on the next poll)."""
    client.force_login(viewer)
    url = reverse("dashboard:cards")
    for view in ("", "view=table&"):
        page = client.get(f"{url}?{view}", HTTP_HX_REQUEST="true").content.decode()
        listed = re.search(r'data-hosts="([^"]+)"', page)
        assert listed is not None
        client.get(f"{url}?{view}hosts={listed.group(1)}&have=", HTTP_HX_REQUEST="true")  # every one as a swap
    for view in ("", "view=table&"):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"{url}?{view}", HTTP_HX_REQUEST="true").status_code == 200
        assert len(queries.captured_queries) == 4, f"{view or 'cards'}: some were rendered again"
