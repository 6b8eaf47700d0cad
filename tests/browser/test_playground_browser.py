"""The chat playground in real Chromium: a real agent serves the real Gemma 3 270M on llama-server;
an operator chats with it from the revision page (the answer streams in, two turns, tokens/s and
time to first token after each), stops a long answer, and the page reports nothing under the
Content-Security-Policy."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse

from deployments.models import ModelVariant
from tests.browser.chromium import snap
from tests.browser.test_csp_browser import WATCH
from tests.deployments.test_playground_engine import serve

pytestmark = [pytest.mark.browser, pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
ANSWER_MS = 180_000
STATS = re.compile(r"time to first token \d+ ms · [\d.]+ tokens/s · \d+ tokens")


def ask(page: Any, text: str) -> Any:
    """Type a message, press Enter; the answer's box."""
    page.fill("#playground-form textarea[name=prompt]", text)
    page.press("#playground-form textarea[name=prompt]", "Enter")
    return page.locator("#playground-log .turn.assistant").last


def test_an_operator_chats_with_the_served_model_and_stops_a_long_answer(live_server, lab, operator, page):
    from playwright.sync_api import expect

    ModelVariant.objects.filter(pk=lab["gemma"].pk).update(sampling_presets={"default": {"temperature": 0.2}})
    revision = serve(lab, operator)
    violations: list[str] = []
    page.on("pageerror", lambda e: violations.append(str(e)))
    page.add_init_script(WATCH)
    base = live_server.url
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "pw-otto")
    page.click("button[type=submit]")
    page.goto(base + reverse("deployments:revision_detail", args=[revision.host.name, revision.number]))

    form = page.locator("#playground-form")
    expect(form.locator("input[name=temperature]")).to_have_value("0.2")
    expect(form.locator("input[name=max_tokens]")).to_have_value("512")
    form.locator("input[name=max_tokens]").fill("12")  # a shared CPU: a few tokens a second at worst
    stats = form.locator(".playground-stats")

    first = ask(page, "Say hello in one short sentence.")
    expect(stats).to_have_text(STATS, timeout=ANSWER_MS)
    assert first.locator(".turn-text").inner_text().strip()
    expect(page.locator("#playground-log .turn.user")).to_have_text(re.compile("Say hello"))

    ask(page, "Now say goodbye.")
    expect(page.locator("#playground-log .turn.assistant")).to_have_count(2)
    expect(stats).to_have_text(STATS, timeout=ANSWER_MS)
    snap(page, "playground-two-turns")

    # A long answer (temperature 2 keeps it going until max tokens), stopped after a few words.
    form.locator("input[name=temperature]").fill("2")
    form.locator("input[name=max_tokens]").fill("1500")
    long = ask(page, "Tell me a very long story.")
    expect(long.locator(".turn-text")).not_to_have_text("", timeout=ANSWER_MS)
    expect(form.locator(".playground-send")).to_be_disabled()
    form.get_by_role("button", name="Stop").click()
    expect(long).to_have_class(re.compile(r"\bstopped\b"))
    expect(stats).to_have_text("Stopped.")
    expect(form.locator(".playground-send")).to_be_enabled()
    snap(page, "playground-stopped")

    # New chat empties the conversation.
    form.get_by_role("button", name="New chat").click()
    expect(page.locator("#playground-log .turn")).to_have_count(0)
    assert page.evaluate("window.__csp") == [] and violations == []
