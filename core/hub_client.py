"""Which hub a call through `huggingface_hub` goes to, and what it may raise besides its own
errors (pure: no Django)."""

from __future__ import annotations

import importlib
import os

DEFAULT_ENDPOINT = "https://huggingface.co"


def hub_endpoint() -> str:
    """The hub's base URL: `HF_ENDPOINT` (a mirror) read at each call, else Hugging Face."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client errors huggingface_hub lets through: httpx2's (2.x), httpx's (1.x)."""
    found: list[type[BaseException]] = []
    for module in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(module).HTTPError)
        except ImportError:
            continue
    return tuple(found)
