"""The dashboard: every host as a card (or a table row), rendered once per fingerprint and sent
only when it changed. Its URLs are `dashboard:` (dashboard/urls.py), its templates
`templates/dashboard/`, its reads `dashboard.selectors`.

A card's HTML depends only on its data (no per-viewer content: the template holds none), so
it is cached under its fingerprint (dashboard.selectors) and the template's own
source, shared by every viewer. The database computes every card's fingerprint in one query; a
card is built (its host, GPUs and samples as objects) only when its rendering is not in the
cache, and filed under the fingerprint read with the very rows it was built from.

The page polls with the fingerprints it shows (static/js/host_cards.js adds `have` and
`hosts`); the answer holds only the cards whose fingerprint changed, as htmx out-of-band
swaps, and nothing else (`HX-Reswap: none`). When the hosts themselves changed (one came or
went), or the browser says nothing, the answer is every card.
"""

from __future__ import annotations

import hashlib
import re

from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from controlpanel.roles import VIEWER, role_required
from core.http import template_version
from dashboard.selectors import CardIndex, card_index, dashboard_cards
from deployments import selectors as deployment_selectors
from deployments.selectors.hosts import HOT_C

CARD_TEMPLATE = "dashboard/_host_card.html"
ROW_TEMPLATE = "dashboard/_host_row.html"  # the table view's row: the same data, the same fingerprint
VIEWS = {"cards": (CARD_TEMPLATE, "dashboard/_host_cards.html"), "table": (ROW_TEMPLATE, "dashboard/_host_table.html")}
CACHE_SECONDS = 600
MAX_HAVE = 5000  # fingerprints a poll may name
_VERSION = re.compile(r"^[0-9a-f]{10}$")


def _templates_version() -> str:
    """The card templates' own text: a changed template never serves an old rendering."""
    return template_version(CARD_TEMPLATE, ROW_TEMPLATE, "hardware/_operation_widget.html")


def hosts_version(index: CardIndex) -> str:
    """Which hosts, in which order: when this changes the page gets every card again."""
    return hashlib.blake2b(",".join(index.names.values()).encode(), digest_size=5).hexdigest()


def dashboard_view(request: HttpRequest) -> str:
    """ "table" (a row per host) or "cards", as the page asks with ?view=."""
    return "table" if request.GET.get("view") == "table" else "cards"


def rendered_cards(
    index: CardIndex, host_ids: list[int] | None = None, *, oob: bool = False, view: str = "cards"
) -> list[SafeString]:
    """Each card's (or table row's) HTML, every host's or these hosts', from the cache where its
    fingerprint was rendered before; only the others are built and rendered."""
    template = VIEWS[view][0]
    ids = list(index.versions) if host_ids is None else host_ids
    prefix = f"host{view}:{_templates_version()}"
    keys = {host_id: f"{prefix}:{index.versions[host_id]}:{int(oob)}" for host_id in ids}
    found = cache.get_many(list(keys.values()))
    html = {host_id: found[key] for host_id, key in keys.items() if key in found}
    fresh: dict[str, str] = {}
    for card in dashboard_cards([host_id for host_id, key in keys.items() if key not in found]):
        # Filed under the fingerprint of what was rendered: a host that changed since the rows
        # were read never leaves newer HTML under its older fingerprint.
        html[card.host.pk] = fresh[f"{prefix}:{card.version}:{int(oob)}"] = render_to_string(
            template, {"card": card, "oob": oob}
        )
    if fresh:
        cache.set_many(fresh, CACHE_SECONDS)
    return [mark_safe(html[host_id]) for host_id in ids if host_id in html]  # noqa: S308 - our own template's output


def changed_hosts(request: HttpRequest, index: CardIndex) -> list[int] | None:
    """The hosts whose card fingerprint the polling page does not show, or None when it should
    get every card (it named none, or the hosts are not the ones it shows)."""
    hosts = request.GET.get("hosts", "")
    have = request.GET.get("have", "")
    if not hosts or hosts != hosts_version(index) or len(have) > 11 * MAX_HAVE:
        return None
    shown = {v for v in have.split(".") if _VERSION.match(v)}
    return [host_id for host_id, version in index.versions.items() if version not in shown]


def changed_cards_response(index: CardIndex, host_ids: list[int], view: str = "cards") -> HttpResponse:
    """Only the changed cards (or rows), each swapped in by its id; the poller's own content stays."""
    response = HttpResponse("".join(rendered_cards(index, host_ids, oob=True, view=view)))
    response["HX-Reswap"] = "none"
    return response


@require_GET
@role_required(VIEWER)
def index(request: HttpRequest) -> HttpResponse:
    index_ = card_index()
    view = dashboard_view(request)
    return render(
        request,
        "dashboard/index.html",
        {
            "view": view,
            "list_template": VIEWS[view][1],
            "rendered": rendered_cards(index_, view=view),
            "hosts_version": hosts_version(index_),
            "first_steps": deployment_selectors.first_steps(),
            "hot_c": HOT_C,
        },
    )


@require_GET
@role_required(VIEWER)
@vary_on_headers("HX-Request")
def cards(request: HttpRequest) -> HttpResponse:
    """The dashboard's cards, or its table's rows with ?view=table (the page polls this: only
    those that changed since what it shows)."""
    index = card_index()
    view = dashboard_view(request)
    changed = changed_hosts(request, index)
    if changed is not None:
        return changed_cards_response(index, changed, view)
    context = {"rendered": rendered_cards(index, view=view), "hosts_version": hosts_version(index)}
    return render(request, VIEWS[view][1], context)
