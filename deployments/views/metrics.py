"""The panel's Prometheus `/metrics` (docs/metrics.md): for a scraper whose address is in
CONTROLPANEL_METRICS_ALLOWED_NETWORKS, one with the bearer token of CONTROLPANEL_METRICS_TOKEN, or,
with no token set, for clients on the panel's own machine (loopback, CONTROLPANEL_LAN_ADDRESS)."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from controlpanel.hardening import client_ip
from deployments.metrics import panel_metrics


def _allowed(request: HttpRequest) -> bool:
    try:
        ip = ipaddress.ip_address(client_ip(request) or "")
    except ValueError:
        ip = None
    networks = settings.CONTROLPANEL_METRICS_ALLOWED_NETWORKS  # the configured scrapers' addresses
    if ip is not None and any(ip in ipaddress.ip_network(n) for n in networks):
        return True
    token = settings.CONTROLPANEL_METRICS_TOKEN
    if token:
        scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(sent.strip().encode(), token.encode())
    # This machine: loopback, or its LAN address (a scraper on the box reaching a panel bound there).
    return ip is not None and (ip.is_loopback or str(ip) == settings.LAN_ADDRESS)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        response = HttpResponse(
            "Forbidden: see CONTROLPANEL_METRICS_TOKEN and CONTROLPANEL_METRICS_ALLOWED_NETWORKS.\n",
            status=403,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="controlpanel-metrics"'
        return response
    return HttpResponse(panel_metrics(), content_type=CONTENT_TYPE_LATEST)
