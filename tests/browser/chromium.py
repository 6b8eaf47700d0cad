"""Real Chromium (Debian's package) driven by Playwright, for the browser tests."""

from __future__ import annotations

import os
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def snap(page: Any, name: str) -> None:
    """Full-page screenshots into $BROWSER_SCREENSHOTS when set (for looking at the pages)."""
    folder = os.environ.get("BROWSER_SCREENSHOTS")
    if folder:
        page.screenshot(path=os.path.join(folder, f"{name}.png"), full_page=True)
