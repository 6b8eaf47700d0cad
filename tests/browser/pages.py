"""Steps the browser tests take on the panel's own forms, written once."""

from __future__ import annotations

from typing import Any


def start_custom_benchmark(
    page: Any, *, concurrency: str, input_tokens: int, output_tokens: int, requests: int
) -> None:
    """On a host's Benchmark page: the custom profile with these numbers, then submit."""
    page.select_option("select[name=profile]", "custom")
    page.fill("input[name=concurrency]", concurrency)
    page.fill("input[name=input_tokens]", str(input_tokens))
    page.fill("input[name=output_tokens]", str(output_tokens))
    page.fill("input[name=requests]", str(requests))
    page.click("form.benchmark-form button[type=submit]")
