"""Who the panel's /metrics answers besides loopback and the token (docs/metrics.md): the scrapers
an operator names by address (CONTROLPANEL_METRICS_ALLOWED_NETWORKS), and, with the LAN setting, a
Prometheus on the same box that reaches the panel at its LAN address (issue 41)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_a_configured_scrapers_address_is_answered_with_or_without_a_token(settings: Any) -> None:
    client = Client()
    settings.CONTROLPANEL_METRICS_ALLOWED_NETWORKS = ["10.0.5.0/24", "10.9.9.9/32"]
    for scraper in ("10.0.5.77", "10.9.9.9"):
        answered = client.get("/metrics", REMOTE_ADDR=scraper)
        assert answered.status_code == 200 and b"controlpanel_hosts" in answered.content  # the series, not a page
    refused = client.get("/metrics", REMOTE_ADDR="10.0.6.1")
    assert refused.status_code == 403 and b"CONTROLPANEL_METRICS_ALLOWED_NETWORKS" in refused.content
    settings.CONTROLPANEL_METRICS_TOKEN = "scrape-me-0123456789"
    assert client.get("/metrics", REMOTE_ADDR="10.0.5.77").status_code == 200  # its address is enough
    assert client.get("/metrics", REMOTE_ADDR="10.0.6.1").status_code == 403


def test_with_the_lan_setting_a_prometheus_on_the_same_box_is_not_refused(settings: Any) -> None:
    """The panel listens on the LAN address only: a scraper on the box connects from that address."""
    client = Client()
    assert client.get("/metrics", REMOTE_ADDR="10.213.7.1").status_code == 403
    settings.LAN_ADDRESS = "10.213.7.1"
    answered = client.get("/metrics", REMOTE_ADDR="10.213.7.1")
    assert answered.status_code == 200 and b"controlpanel_hosts" in answered.content
    assert client.get("/metrics", REMOTE_ADDR="10.213.7.2").status_code == 403  # another machine of the LAN
