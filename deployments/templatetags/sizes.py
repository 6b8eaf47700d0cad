"""Sizes on pages: `{% load sizes %}{{ host.ram_bytes|size }}` reads "48.27 GiB", with the exact
bytes in its title. Binary units, as the planner, the engines and the diff print them
(serving/diffing/fmt.py); never a bare "51,832,042,176 bytes" and never Django's
filesizeformat (which says "GB" for GiB)."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from serving.diffing import fmt

register = template.Library()


@register.filter
def size(value: object) -> SafeString | str:
    """A byte count as GiB/MiB/KiB with the exact bytes in a title; "unknown" for anything else."""
    if fmt.number(value) is None:
        return fmt.UNKNOWN
    return format_html('<span class="size" title="{}">{}</span>', fmt.exact_bytes(value), fmt.size_bytes(value))


@register.filter
def params(value: object) -> str:
    """A parameter count as people say it: 27_400_000_000 -> "27.4B", 268_000_000 -> "268M"."""
    return fmt.params(value)


@register.filter
def count(value: object) -> str:
    """A whole number with thousands separators (32768 -> "32,768"); "unknown" for anything else."""
    return fmt.count(value)
