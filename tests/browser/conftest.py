"""The browser tests' page: a fresh Chromium context per test (tests/browser/chromium.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.chromium import ARGS, CHROMIUM


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if not shutil.which(CHROMIUM):
        pytest.skip("Chromium is not installed (apt-get install -y chromium)")
    # Playwright's sync API keeps an event loop in this thread; the ORM calls the test makes
    # between browser steps are plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(30_000)
        pg = context.new_page()
        # The panel never uses the browser's own dialogs (static/js/confirm.js): any that shows up
        # is recorded, and dismissed, for the tests that check there are none.
        native: list[str] = []
        pg.on("dialog", lambda d: (native.append(d.message), d.dismiss()))
        pg.native_dialogs = native
        try:
            yield pg
        finally:
            context.close()
            browser.close()
