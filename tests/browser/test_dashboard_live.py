"""The dashboard stays live in a real browser while it polls only for what changed: a host's
new state reaches its card within a poll or two, and the cards that did not change are left
alone (the same DOM nodes, not re-rendered). The page fixture is tests/browser/conftest.py's."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from hardware.models import GPU, GpuSample, Host

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_card_changes_live_and_the_others_are_left_alone(live_server: Any, page: Any, viewer: User) -> None:
    from playwright.sync_api import expect

    now = timezone.now()
    hosts = [
        Host.objects.create(
            name=f"box-{i}",
            queue=f"host.box-{i}",
            nvml_available=True,
            last_heartbeat=now,
            engine_state={"running": True, "health": "healthy", "engine": "vllm", "revision_label": "r1"},
            engine_metrics={"requests_running": 1, "requests_waiting": 0},
        )
        for i in range(3)
    ]
    gpus = [GPU.objects.create(host=h, index=0, name="NVIDIA H200", memory_bytes=141 * 1024**3) for h in hosts]
    GpuSample.objects.bulk_create([GpuSample(gpu=g, ts=now, util_pct=10, power_w=100) for g in gpus])

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "vera")
    page.fill("input[name=password]", "pw-vera")
    page.click("button[type=submit]")
    card = page.locator('article[data-host="box-1"]')
    expect(card).to_contain_text("util 10%")
    page.evaluate("document.getElementById('host-card-box-0').dataset.mark = 'untouched'")
    with page.expect_response(lambda r: "/hosts/cards/" in r.url and "have=" in r.url, timeout=15_000) as quiet:
        pass
    assert quiet.value.status == 200 and quiet.value.body() == b""  # nothing changed: nothing sent

    Host.objects.filter(pk__in=[h.pk for h in hosts]).update(last_heartbeat=timezone.now())
    GpuSample.objects.create(gpu=gpus[1], ts=timezone.now(), util_pct=88, power_w=650)
    Host.objects.filter(pk=hosts[1].pk).update(engine_metrics={"requests_running": 7, "requests_waiting": 2})
    expect(card).to_contain_text("util 88%", timeout=15_000)
    expect(card).to_contain_text("running 7")
    assert page.evaluate("document.getElementById('host-card-box-0').dataset.mark") == "untouched"
    assert page.locator("article[data-host]").count() == 3


def test_the_table_view_updates_rows_live_and_keeps_its_sort(live_server: Any, page: Any, viewer: User) -> None:
    """A row per host: a click on "Util" sorts the rows, a new telemetry round reaches its row
    within a poll or two in place, and the order chosen survives the page's reload."""
    from playwright.sync_api import expect

    now = timezone.now()
    hosts = [
        Host.objects.create(name=f"rack-{i}", queue=f"host.rack-{i}", nvml_available=True, last_heartbeat=now)
        for i in range(3)
    ]
    gpus = [
        GPU.objects.create(host=h, index=i, name="NVIDIA H200", memory_bytes=141 * 1024**3)
        for h in hosts
        for i in (0, 1)
    ]
    util = {"rack-0": 30, "rack-1": 90, "rack-2": 60}
    GpuSample.objects.bulk_create([GpuSample(gpu=g, ts=now, util_pct=util[g.host.name], temp_c=50) for g in gpus])

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "vera")
    page.fill("input[name=password]", "pw-vera")
    page.click("button[type=submit]")
    page.click("text=table")
    rows = page.locator("table.hosts-table tbody tr[data-host]")
    expect(rows).to_have_count(3)
    expect(page.locator("#host-row-rack-0")).to_contain_text("2× H200")
    expect(page.locator("#host-row-rack-1")).to_contain_text("90%")

    page.click("table.hosts-table th:has-text('Util')")
    page.click("table.hosts-table th:has-text('Util')")  # again: highest first
    assert [rows.nth(i).get_attribute("data-host") for i in range(3)] == ["rack-1", "rack-2", "rack-0"]

    page.evaluate("document.getElementById('host-row-rack-2').dataset.mark = 'untouched'")
    Host.objects.update(last_heartbeat=timezone.now())
    GpuSample.objects.bulk_create([GpuSample(gpu=g, ts=timezone.now(), util_pct=5, temp_c=91) for g in gpus[:2]])
    row = page.locator("#host-row-rack-0")
    expect(row).to_contain_text("5%", timeout=15_000)
    expect(row).to_contain_text("91 °C")
    assert page.evaluate("document.getElementById('host-row-rack-2').dataset.mark") == "untouched"
    assert rows.nth(2).get_attribute("data-host") == "rack-0"  # swapped in where it was

    page.reload()
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-host") for i in range(3)] == ["rack-1", "rack-2", "rack-0"]


def test_only_hosts_that_need_attention_and_one_that_starts_to(live_server: Any, page: Any, viewer: User) -> None:
    """The filter hides the hosts that are fine, in both views; a host that goes offline while
    the page watches appears by itself, and the count follows."""
    from playwright.sync_api import expect

    now = timezone.now()
    fine = Host.objects.create(name="fine", queue="host.fine", nvml_available=True, last_heartbeat=now)
    Host.objects.create(name="away", queue="host.away", last_heartbeat=now - timedelta(hours=2))
    hot = Host.objects.create(name="hot", queue="host.hot", nvml_available=True, last_heartbeat=now)
    for host, temp in ((fine, 60.0), (hot, 91.0)):
        gpu = GPU.objects.create(host=host, index=0, name="NVIDIA H200", memory_bytes=141 * 1024**3)
        GpuSample.objects.create(gpu=gpu, ts=now, util_pct=50, temp_c=temp)

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "vera")
    page.fill("input[name=password]", "pw-vera")
    page.click("button[type=submit]")
    page.check("#attention-only")
    expect(page.locator("#attention-count")).to_have_text("2")
    expect(page.locator('article[data-host="fine"]')).to_be_hidden()
    expect(page.locator('article[data-host="away"]')).to_be_visible()
    expect(page.locator('article[data-host="hot"]')).to_be_visible()

    page.click("text=table")  # the choice is kept for the tab, and applies to the rows
    expect(page.locator("#attention-only")).to_be_checked()
    expect(page.locator("#host-row-fine")).to_be_hidden()
    expect(page.locator("#host-row-hot")).to_be_visible()

    Host.objects.filter(pk=hot.pk).update(last_heartbeat=timezone.now())
    Host.objects.filter(pk=fine.pk).update(last_heartbeat=timezone.now() - timedelta(hours=1))
    expect(page.locator("#host-row-fine")).to_be_visible(timeout=15_000)
    expect(page.locator("#attention-count")).to_have_text("3")
    page.uncheck("#attention-only")
    expect(page.locator("table.hosts-table tbody tr[data-host]:visible")).to_have_count(3)
