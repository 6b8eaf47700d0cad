"""The host page follows the engine's log in real Chromium while switches run (a real agent and
llama-server): the lines of the start appear without a reload, the next switch's start follows
with a marker, and the filter keeps warnings and errors."""

from __future__ import annotations

from typing import Any

import pytest

from deployments.services.switch import switch_request
from tests.browser.chromium import snap
from tests.support.operations import wait_done

pytestmark = [
    pytest.mark.browser,
    pytest.mark.engine,
    pytest.mark.celery,
    pytest.mark.django_db(transaction=True),
]


def test_the_host_page_follows_the_engine_log_through_two_switches(live_server, lab, page: Any, operator) -> None:
    from playwright.sync_api import expect

    host = lab["host"]
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "pw-otto")
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/hosts/{host.name}/")
    box = page.locator("#engine-log")
    expect(box).to_contain_text("No engine log yet")
    page.evaluate("window.__samePage = 'yes'")  # gone if the page reloads

    lines = page.locator("#engine-log-lines")
    first = switch_request(revision=lab["rev"]("first", 2048), actor=operator)
    expect(lines).to_contain_text("listening on http://", timeout=90_000)
    expect(lines).to_contain_text("n_ctx_slot = 2048")
    assert wait_done(first).state == "succeeded"
    snap(page, "engine-log-first-start")

    switch_request(revision=lab["rev"]("second", 4096), actor=operator)
    expect(lines.locator(".log-restart")).to_contain_text("the engine started again", timeout=90_000)
    expect(lines).to_contain_text("n_ctx_slot = 4096", timeout=90_000)
    assert page.evaluate("window.__samePage") == "yes"
    snap(page, "engine-log-second-start")

    # Warnings and errors only: the start-up chatter goes, the box says how to get it back.
    page.click("#engine-log .engine-log-filter")
    expect(page.locator("#engine-log .engine-log-filter")).to_have_text("Show every line")
    expect(page.locator("#engine-log-lines")).not_to_contain_text("listening on http://")

    page.click("#engine-log .engine-log-filter")
    expect(page.locator("#engine-log-lines")).to_contain_text("listening on http://")

    # Earlier starts stay readable on the log page.
    page.click("text=Full log and earlier starts")
    expect(page.locator("table.engine-log-runs tbody tr")).to_have_count(2)
    page.locator("table.engine-log-runs tbody tr").nth(1).locator("a").first.click()
    expect(page.locator("#engine-log-lines")).to_contain_text("n_ctx_slot = 2048")
