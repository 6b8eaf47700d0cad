"""A failed send to Telegram, Discord or Slack keeps and shows an error without the channel's
credentials (issue 24).

The sends are real: Apprise posts to the service's own HTTPS API through a proxy on a local port
that refuses the connection (HTTPS_PROXY, which the HTTP library honours), so the failure is the
one a panel without a route out gets, and the library's message repeats the request's path, where
Telegram's bot token and Discord's and Slack's webhook tokens sit. Nothing leaves this machine."""

from __future__ import annotations

import socket

import pytest
from django.contrib.auth.models import User
from django.test import Client

from notifications.choices import DeliveryState
from notifications.models import Delivery
from notifications.services import channel_create, channel_test_send, delivery_send

pytestmark = pytest.mark.django_db(transaction=True)

TELEGRAM_TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
DISCORD_ID, DISCORD_TOKEN = "112233445566778899", "Ab-Cd_EfGhIjKlMnOpQrStUvWxYz0123456789abcdefGhIjKlMnOpQrStUvWx"
SLACK = ("T1JJ3T3L2", "A1BRTD4JD", "TIiajkdnlazkcOXrIdevi7FQ")
CHANNELS = [
    pytest.param(
        f"tgram://{TELEGRAM_TOKEN}/-1001234567890", [TELEGRAM_TOKEN, "AAHdqTcvCH1vGWJxf", "123456789"], id="telegram"
    ),
    pytest.param(f"discord://{DISCORD_ID}/{DISCORD_TOKEN}", [DISCORD_ID, DISCORD_TOKEN[:20]], id="discord"),
    pytest.param(f"slack://{'/'.join(SLACK)}/#ops", list(SLACK), id="slack"),
]


@pytest.fixture
def refusing_proxy(monkeypatch: pytest.MonkeyPatch) -> int:
    """A local port nothing listens on, as every HTTPS request's proxy."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{port}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    return port


@pytest.mark.parametrize(("url", "secrets"), CHANNELS)
def test_a_failed_send_stores_and_shows_its_error_without_the_channels_credentials(
    url: str, secrets: list[str], admin_user: User, refusing_proxy: int
) -> None:
    channel = channel_create(name="ops-chat", url=url, actor=admin_user)
    delivery = channel_test_send(channel=channel, actor=admin_user)
    assert delivery_send(delivery_id=delivery.pk) == DeliveryState.FAILED

    stored = Delivery.objects.get(pk=delivery.pk)
    # The error still says what went wrong (the proxy refused), only without the credentials.
    assert stored.state == DeliveryState.FAILED and "proxy" in stored.error.lower(), stored.error
    assert [s for s in secrets if s in stored.error] == [], stored.error

    client = Client()
    client.force_login(admin_user)
    page = client.get("/notifications/").content.decode()
    assert "proxy" in page.lower() and "ops-chat" in page
    assert [s for s in secrets if s in page] == []
