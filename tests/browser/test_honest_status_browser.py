"""Issue 12's honest-status items that only a browser can show, in real Chromium against a live
server (no engine, no worker): the live planner answers while the Message field is empty, a
long unbroken form error does not widen the page, and hx-confirm asks in the page, never
through the browser's native dialog."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.deployments.test_views_revisions import make_lab

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _sign_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"pw-{username}")
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def test_planner_updates_with_an_empty_message_and_errors_never_widen_the_page(live_server, catalog, operator, page):
    from playwright.sync_api import expect

    make_lab(operator)
    base = live_server.url
    _sign_in(page, base, "otto")
    page.goto(base + reverse("deployments:revision_new", args=["lab"]))
    expect(page.locator("#planner .planner-report")).to_be_visible()
    assert page.input_value("textarea[name=message]") == ""
    page.fill("textarea[name=knobs]", "tensor_parallel_size=2\nmax_model_len=12345")
    expect(page.locator("#planner")).to_contain_text("12345 tokens")  # the Message field is still empty
    page.fill("textarea[name=knobs]", "tensor_parallel_size=3\nmax_model_len=12345")
    expect(page.locator("#planner")).to_contain_text("parallel.too_many_gpus")

    # A long unbroken value in an error: the page stays as wide as the window.
    page.fill("textarea[name=knobs]", "x" * 400 + "=1")
    expect(page.locator("#planner .errorlist")).to_be_visible()
    page.fill("textarea[name=message]", "m")
    page.click("#revision-form button[type=submit]")
    expect(page.locator("#revision-form .errorlist")).to_be_visible()
    width, window = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= window, f"the page widened to {width}px in a {window}px window"


def test_hx_confirm_asks_in_the_page(live_server, catalog, operator, admin_user, viewer, page):
    from playwright.sync_api import expect

    base = live_server.url
    _sign_in(page, base, "ada")
    page.goto(base + reverse("people:detail", args=["vera"]))
    button = page.locator("#person-deactivate button[type=submit]")
    button.click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Deactivate vera?")
    dialog.get_by_role("button", name="Back").click()
    expect(dialog).to_be_hidden()
    viewer.refresh_from_db()
    assert viewer.is_active  # Back sent nothing
    button.click()
    dialog.get_by_role("button", name="Yes, go ahead").click()
    expect(dialog).to_be_hidden()
    page.wait_for_timeout(500)
    viewer.refresh_from_db()
    assert not viewer.is_active  # Yes sent the request
    assert page.native_dialogs == []  # never the browser's own confirm()
