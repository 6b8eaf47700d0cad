"""The exports page's Copy and Download buttons in real Chromium under the strict
Content-Security-Policy: Copy puts the export's exact text on the clipboard (static/js/exports.js,
the Clipboard API), Download saves it as a file with the export's own name; nothing is reported."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deployments.test_views_revisions import make_lab

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_copy_and_download_an_export(live_server: Any, page: Any, catalog: None, operator: Any) -> None:
    from playwright.sync_api import expect

    make_lab(operator)
    base = live_server.url
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "pw-otto")
    page.click("button[type=submit]")
    page.goto(f"{base}/hosts/lab/revisions/1/exports/")

    shown = page.locator("#text-opencode").text_content()
    assert shown and '"qwen"' in shown
    button = page.locator('button[data-copy="text-opencode"]')
    button.click()
    expect(button).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == shown

    with page.expect_download() as info:
        page.click('a[href="?download=systemd"]')
    download = info.value
    assert download.suggested_filename.endswith(".service"), download.suggested_filename
    with open(download.path(), encoding="utf-8") as saved:
        assert saved.read() == page.locator("#text-systemd").text_content()
    assert problems == []
