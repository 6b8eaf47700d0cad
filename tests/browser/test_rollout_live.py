"""A rollout's page follows its waves live in a real browser: started from the form, the
canary's switch ends and the next wave shows as switching without a reload; the second wave
fails and the page shows it stopped, with the untouched host still untouched. The switches'
ends are reported as the agent API reports them (no agent runs here: the end-to-end run with
three real agents is tests/rollouts/test_rollout_e2e.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from deployments.services.host_reports import operation_host_begin, operation_host_finish
from rollouts.models import Rollout, RolloutHost
from tests.browser.test_csp_browser import WATCH
from tests.rollouts.conftest import fleet  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _end(host_name: str, ok: bool) -> None:
    part = RolloutHost.objects.select_related("operation__host", "operation__revision").get(host__name=host_name)
    op = part.operation
    operation_host_begin(host=op.host, op_id=op.pk, worker="test")
    error = "" if ok else "r2 did not come up (the test says so)"
    operation_host_finish(op=op, state="succeeded" if ok else "failed", result={"rolled_back": not ok}, error=error)


def test_the_rollout_page_follows_the_waves_live(live_server: Any, page: Any, operator: User, fleet: Any) -> None:  # noqa: F811
    from playwright.sync_api import expect

    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script(WATCH)  # the page reports any Content-Security-Policy violation to itself
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "pw-otto")
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/rollouts/new/?group=fleet")
    page.fill("textarea[name=knobs]", "threads=4")
    page.fill("input[name=message]", "four threads")
    page.fill("input[name=batch_size]", "2")
    page.click("#rollout-form button[type=submit]")

    def row(letter: str) -> Any:
        return page.locator(f'tr.rollout-host[data-host="fleet-{letter}"]')

    expect(row("a")).to_have_attribute("data-state", "switching")
    expect(row("b")).to_contain_text("Untouched")
    expect(page.locator("#rollout-state")).to_have_text("Running")

    _end("fleet-a", ok=True)
    expect(row("a")).to_contain_text("Done", timeout=10_000)
    expect(row("b")).to_have_attribute("data-state", "switching")
    expect(row("c")).to_contain_text("switching to r2")

    _end("fleet-c", ok=False)
    expect(row("c")).to_have_attribute("data-state", "failed", timeout=10_000)
    expect(row("b")).to_have_attribute("data-state", "switching")  # still in flight: the wave waits for it
    _end("fleet-b", ok=True)
    expect(row("b")).to_have_attribute("data-state", "rolling_back", timeout=10_000)
    _end("fleet-b", ok=True)  # its switch back to r1
    expect(page.locator("#rollout-state")).to_have_text("Stopped by a failure", timeout=10_000)
    expect(row("b")).to_contain_text("back on r1")
    expect(row("d")).to_contain_text("Untouched")
    expect(page.locator("#rollout-error")).to_contain_text("fleet-c")
    expect(page.locator("#rollout-cancel")).to_have_count(0)  # an ended rollout has no buttons
    assert Rollout.objects.get().state == "failed"
    assert page.evaluate("window.__csp") == [] and errors == []
