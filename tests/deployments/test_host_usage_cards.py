"""Every host's card and table row show its CPU busy and RAM used of its total, CPU-only hosts'
first of all; its page plots them over the last hour. The card's fingerprint moves when RAM moves
by more than the card's rounding, and not on the noise below it."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dashboard.selectors import card_index, dashboard_cards
from hardware.models import GPU, GpuSample, Host, HostSample
from tests.deployments.test_views_hosts import SVG, parse_svg

pytestmark = pytest.mark.django_db
GIB = 1024**3


def sample(host: Host, *, cpu: float | None = 37.4, used_gib: float = 12.0, ago_s: float = 0) -> HostSample:
    return HostSample.objects.create(
        host=host,
        ts=timezone.now() - timedelta(seconds=ago_s),
        cpu_pct=cpu,
        load_1=1.5,
        load_5=1.25,
        load_15=0.75,
        mem_total_bytes=24 * GIB,
        mem_available_bytes=round((24 - used_gib) * GIB),
        swap_total_bytes=2 * GIB,
        swap_used_bytes=GIB // 2,
    )


@pytest.fixture
def cpu_box(db: Any) -> Host:
    """A CPU-only host whose agent reports: no GPU, a CPU and memory sample every 10 s."""
    host = Host.objects.create(name="cpu-box", last_heartbeat=timezone.now(), nvml_available=False)
    for n in range(30, 0, -1):
        sample(host, cpu=20.0 + n, used_gib=11.0, ago_s=10 * n)
    sample(host)  # the latest: 37.4 % busy, 12 of 24 GiB in use
    return host


def card_of(html: str, name: str) -> str:
    found = re.search(rf'<article id="host-card-{name}".*?</article>', html, re.S)
    assert found is not None, f"no card for {name}"
    return found.group(0)


def test_a_cpu_only_hosts_card_shows_its_cpu_and_ram(client: Client, viewer: User, cpu_box: Host) -> None:
    Host.objects.create(name="quiet", last_heartbeat=timezone.now())  # its agent never sent a sample
    client.force_login(viewer)
    html = client.get(reverse("dashboard:index")).content.decode()
    card = card_of(html, "cpu-box")
    assert "CPU only" in card and "No GPUs." in card
    assert "CPU 35%" in card and '<span class="w35">' in card  # 37.4 % to the card's 5 % steps
    assert "RAM 12.0 / 24.0 GiB" in card and '<span class="w50">' in card
    assert "CPU " not in card_of(html, "quiet").replace("CPU only", "") and "RAM " not in card_of(html, "quiet")

    single = client.get(reverse("hardware:host_card", args=["cpu-box"]), HTTP_HX_REQUEST="true")
    assert "RAM 12.0 / 24.0 GiB" in single.content.decode()


def test_the_table_has_a_cpu_and_a_ram_column_to_sort_by(client: Client, viewer: User, cpu_box: Host) -> None:
    client.force_login(viewer)
    html = client.get(reverse("dashboard:index"), {"view": "table"}).content.decode()
    heads = re.findall(r'<th data-key="(\d+)">([^<]+)</th>', html)
    assert [name for _, name in heads][:5] == ["Host", "Serving", "Requests", "CPU", "RAM"]
    assert [int(key) for key, _ in heads] == list(range(len(heads)))  # a key is its column's index
    row = re.search(r'<tr id="host-row-cpu-box".*?</tr>', html, re.S)
    assert row is not None
    cells = re.findall(r'<td data-sort="([^"]*)"', row.group(0))
    assert len(cells) == len(heads)
    assert cells[3:5] == ["35", "50"]  # CPU %, RAM % used: what the table sorts by
    assert "12.0 / 24.0 GiB" in row.group(0)


def test_a_gpu_hosts_card_shows_them_too(client: Client, viewer: User) -> None:
    host = Host.objects.create(name="rig", last_heartbeat=timezone.now(), nvml_available=True)
    gpu = GPU.objects.create(host=host, index=0, name="NVIDIA H200", memory_bytes=141 * GIB)
    GpuSample.objects.create(gpu=gpu, ts=timezone.now(), util_pct=80, mem_used_bytes=100 * GIB)
    sample(host, cpu=99.0, used_gib=18.0)
    client.force_login(viewer)
    card = card_of(client.get(reverse("dashboard:index")).content.decode(), "rig")
    assert "CPU 100%" in card and "RAM 18.0 / 24.0 GiB" in card and "util 80%" in card


def test_the_host_page_plots_cpu_load_and_memory(client: Client, viewer: User, cpu_box: Host) -> None:
    client.force_login(viewer)
    response = client.get(reverse("hardware:host_detail", args=["cpu-box"]))
    html = response.content.decode()
    charts = response.context["telemetry"]
    assert list(charts) == ["host_cpu", "host_load", "host_memory"]
    series = {
        key: {s.get("data-series"): s.get("data-points") for s in parse_svg(svg).findall(f".//{SVG}g[@class='series']")}
        for key, svg in charts.items()
    }
    assert series["host_cpu"] == {"CPU busy": "31"}
    assert series["host_load"] == {"1 min": "31", "15 min": "31"}
    assert series["host_memory"] == {"RAM used": "31", "RAM total": "31", "swap used": "31"}
    assert "No GPU telemetry in the last 1 hour" in html  # a CPU-only host: its own figures only
    now = re.search(r'<p class="usage-now">(.*?)</p>', html, re.S)
    assert now is not None
    text = " ".join(re.sub(r"<[^>]+>", "", now.group(1)).split())
    assert "CPU 37% busy · load 1.50 / 1.25 / 0.75" in text
    assert "RAM 12 GiB used of 24 GiB (12 GiB available) · swap 512 MiB used of 2 GiB" in text

    partial = client.get(reverse("hardware:host_telemetry", args=["cpu-box"]), HTTP_HX_REQUEST="true")
    assert list(partial.context["telemetry"]) == ["host_cpu", "host_load", "host_memory"]


def test_the_fingerprint_moves_with_ram_beyond_the_rounding_not_with_noise(cpu_box: Host) -> None:
    before = card_index().versions[cpu_box.pk]
    sample(cpu_box, cpu=36.0, used_gib=12.1)  # 0.1 GiB more (a step is 0.24 GiB), CPU in the same 5 %
    assert card_index().versions[cpu_box.pk] == before
    sample(cpu_box, cpu=36.0, used_gib=12.5)  # half a GiB more: a card that says 12.5
    moved = card_index().versions[cpu_box.pk]
    assert moved != before
    sample(cpu_box, cpu=44.0, used_gib=12.5)  # CPU into the next step
    assert card_index().versions[cpu_box.pk] != moved
    # The dashboard's index has the version the built card has, and the card says it.
    (card,) = dashboard_cards([cpu_box.pk])
    assert card.version == card_index().versions[cpu_box.pk]
    assert card.usage == {"cpu": "45%", "cpu_pct": "45", "ram": "12.5 / 24.0 GiB", "ram_pct": "52"}
