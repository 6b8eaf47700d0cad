"""A host's page costs the same whatever its history: a fixed number of queries for a host with
one revision or sixty, one operation or two hundred and fifty; its telemetry charts are drawn
once per set of samples and its what-fits table planned once per GPU set and catalog, and both
follow the data as soon as it changes (bench/bench_dashboard.py times the page)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from deployments.models import BenchmarkRun, Deployment, DeploymentRevision, ModelVariant, Operation
from hardware.models import EngineSample, GpuSample, Host
from tests.deployments.test_views_hosts import SVG, make_host, parse_svg

pytestmark = pytest.mark.django_db
# What the page reads, whatever the host's history: the session, the user and their roles; the
# host with its GPUs, their latest samples and its running operation; the telemetry window's
# stamp (GPU, engine, CPU and memory samples); the catalog's digest; the last revisions,
# operations and benchmark runs; the GPU memory held by processes the panel did not start and the
# newest points of the planner-error trend (bounded per host); whether the host requires review,
# its maintenance window and upcoming scheduled changes, its tags and any open rollout; the lab's
# door mode (open or keys required); the host's last five events. Drawing the charts reads the three
# series, planning what fits the catalog's models.
WARM_QUERIES = 24
COLD_QUERIES = WARM_QUERIES + 3 + 1


@pytest.fixture(autouse=True)
def _no_renderings_from_other_tests() -> Any:
    cache.clear()
    connection.features.supports_json_field  # noqa: B018 - SQLite asks once per connection, in 3 queries
    yield
    cache.clear()


def history(host: Host, revisions: int, operations: int, runs: int) -> None:
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    DeploymentRevision.objects.bulk_create(
        [
            DeploymentRevision(host=host, number=n, engine="vllm", model_variant=variant, message=f"r{n}")
            for n in range(1, revisions + 1)
        ]
    )
    revs = list(DeploymentRevision.objects.filter(host=host).order_by("number"))
    Deployment.objects.create(host=host, active_revision=revs[-1])
    now = timezone.now()
    Operation.objects.bulk_create(
        [
            Operation(
                kind="benchmark" if i % 2 else "switch",
                host=host,
                revision=revs[i % len(revs)],
                exclusive=False,
                state="succeeded",
                log="line\n" * 100,
                result={"levels": list(range(50))},
                created_at=now - timedelta(minutes=i),
            )
            for i in range(operations)
        ]
    )
    BenchmarkRun.objects.bulk_create(
        [
            BenchmarkRun(revision=revs[i % len(revs)], profile_name="quick", engine="vllm", status="succeeded")
            for i in range(runs)
        ]
    )
    EngineSample.objects.bulk_create(
        [EngineSample(host=host, ts=now - timedelta(seconds=10 * k), requests_running=k % 3) for k in range(30)]
    )


def count(client: Client, url: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries.captured_queries), response.content.decode()


def test_the_host_pages_queries_do_not_grow_with_its_history(client: Client, viewer: Any, catalog: None) -> None:
    small, big = make_host("small", 1, samples=2), make_host("big", 8, samples=360)
    history(small, revisions=1, operations=1, runs=1)
    history(big, revisions=60, operations=250, runs=12)
    client.force_login(viewer)
    for host in (small, big):
        url = reverse("hardware:host_detail", args=[host.name])
        cold, _ = count(client, url)
        warm, page = count(client, url)
        assert (host.name, cold, warm) == (host.name, COLD_QUERIES, WARM_QUERIES)
    assert "r60" in page and "r51" in page and "r50" not in page  # the last ten revisions; the rest a link away


def test_the_charts_are_drawn_once_per_set_of_samples_and_follow_a_new_one(
    client: Client, viewer: Any, catalog: None
) -> None:
    host = make_host("rig", 2, samples=30)
    client.force_login(viewer)
    url = reverse("hardware:host_telemetry", args=["rig"])
    first = client.get(url, HTTP_HX_REQUEST="true")
    with CaptureQueriesContext(connection) as queries:
        again = client.get(url, HTTP_HX_REQUEST="true")
    assert again.content == first.content
    assert not [q for q in queries.captured_queries if "ORDER BY" in q["sql"] and "hardware_gpusample" in q["sql"]]

    GpuSample.objects.create(gpu=host.gpus.get(index=1), ts=timezone.now(), util_pct=99, temp_c=61)
    fresh = client.get(url, HTTP_HX_REQUEST="true")
    chart = parse_svg(fresh.context["telemetry"]["util_pct"])
    points = {s.get("data-series"): s.get("data-points") for s in chart.findall(f".//{SVG}g[@class='series']")}
    assert points == {"GPU0": "30", "GPU1": "31"}


def test_what_fits_is_planned_once_per_gpus_and_catalog_and_follows_an_edited_model(
    client: Client, viewer: Any, catalog: None
) -> None:
    make_host("rig", 2, samples=3)
    client.force_login(viewer)
    url = reverse("hardware:host_detail", args=["rig"])
    cold, page = count(client, url)
    warm, again = count(client, url)
    assert warm < cold and "Qwen3.5-27B" in again
    ModelVariant.objects.filter(name="Qwen3.5-27B").update(name="Qwen3.5-27B-renamed")  # edited in place
    _, edited = count(client, url)
    assert "Qwen3.5-27B-renamed" in edited and "Qwen3.5-27B<" not in edited
