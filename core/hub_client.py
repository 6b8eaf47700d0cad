"""What a call through `huggingface_hub` may raise besides its own errors (pure: no Django)."""

from __future__ import annotations

import importlib


def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client errors huggingface_hub lets through: httpx2's (2.x), httpx's (1.x)."""
    found: list[type[BaseException]] = []
    for module in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(module).HTTPError)
        except ImportError:
            continue
    return tuple(found)
