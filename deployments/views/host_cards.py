"""The dashboard's host cards, rendered once per fingerprint and sent only when they changed.

A card's HTML depends only on its data (no per-viewer content: the template holds none), so
it is cached under its fingerprint (`HostCard.version`) and the template's own source, shared
by every viewer. The page polls with the fingerprints it shows (static/js/host_cards.js adds
`have` and `hosts`); the answer holds only the cards whose fingerprint changed, as htmx
out-of-band swaps, and nothing else (`HX-Reswap: none`). When the hosts themselves changed
(one came or went), or the browser says nothing, the answer is every card, as before.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence

from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.template.loader import get_template, render_to_string
from django.utils.safestring import SafeString, mark_safe

from deployments.selectors.hosts import HostCard

CARD_TEMPLATE = "hardware/_host_card.html"
CACHE_SECONDS = 600
MAX_HAVE = 5000  # fingerprints a poll may name
_VERSION = re.compile(r"^[0-9a-f]{10}$")


@functools.cache
def _templates_version() -> str:
    """The card templates' own text: a changed template never serves an old rendering."""
    sources = [get_template(name).template.source for name in (CARD_TEMPLATE, "hardware/_operation_widget.html")]
    return hashlib.blake2b("\0".join(sources).encode(), digest_size=5).hexdigest()


def hosts_version(cards: Sequence[HostCard]) -> str:
    """Which hosts, in which order: when this changes the page gets every card again."""
    return hashlib.blake2b(",".join(c.host.name for c in cards).encode(), digest_size=5).hexdigest()


def rendered_cards(cards: Sequence[HostCard], *, oob: bool = False) -> list[SafeString]:
    """Each card's HTML, from the cache where this fingerprint was rendered before."""
    keys = [f"hostcard:{_templates_version()}:{card.version}:{int(oob)}" for card in cards]
    found = cache.get_many(keys)
    fresh: dict[str, str] = {}
    for key, card in zip(keys, cards, strict=True):
        if key not in found:
            fresh[key] = render_to_string(CARD_TEMPLATE, {"card": card, "oob": oob})
    if fresh:
        cache.set_many(fresh, CACHE_SECONDS)
    return [mark_safe(found.get(key) or fresh[key]) for key in keys]  # noqa: S308 - our own template's output


def changed_cards(request: HttpRequest, cards: Sequence[HostCard]) -> list[HostCard] | None:
    """The cards whose fingerprint the polling page does not show, or None when it should get
    them all (it named none, or the hosts are not the ones it shows)."""
    hosts = request.GET.get("hosts", "")
    have = request.GET.get("have", "")
    if not hosts or hosts != hosts_version(cards) or len(have) > 11 * MAX_HAVE:
        return None
    shown = {v for v in have.split(".") if _VERSION.match(v)}
    return [card for card in cards if card.version not in shown]


def changed_cards_response(cards: Sequence[HostCard]) -> HttpResponse:
    """Only the changed cards, each swapped in by its id; the poller's own content stays."""
    response = HttpResponse("".join(rendered_cards(cards, oob=True)))
    response["HX-Reswap"] = "none"
    return response
