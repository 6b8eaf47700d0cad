"""Issue 37: a failed ntfy delivery kept the channel's topic in its stored error ("Failed to send
ntfy notification to topic 'lab-alerts-...'"), and an ntfy topic is the channel's only secret:
whoever knows it reads and posts to it. The ntfy server here is a real local HTTP server answering
500, as a broken ntfy does; the lab allows loopback (CONTROLPANEL_NOTIFY_ALLOWED_NETWORKS)."""

from __future__ import annotations

import logging
from typing import Any

import apprise
import pytest
from django.contrib.auth.models import User
from django.test import Client

from notifications.channels import plugin_secrets
from notifications.choices import DeliveryState
from notifications.models import Delivery
from notifications.services import channel_create, channel_test_send, delivery_send
from tests.support.receivers import WebhookReceiver

pytestmark = pytest.mark.django_db(transaction=True)
TOPIC = "lab-alerts-x7Qp9-2f"
FORMS = (
    "ntfy://127.0.0.1:{port}/{topic}",
    "ntfy://127.0.0.1:{port}/?to={topic}",  # Apprise's own yaml-friendly form
    "ntfy://ops:pw@127.0.0.1:{port}/{topic}",
)


@pytest.mark.parametrize("form", FORMS)
def test_a_failed_ntfy_delivery_stores_and_shows_its_error_without_the_topic(
    form: str, admin_user: User, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.NOTIFICATIONS_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    with WebhookReceiver(status=500) as ntfy:
        channel = channel_create(name="ops-ntfy", url=form.format(port=ntfy.port, topic=TOPIC), actor=admin_user)
        delivery = channel_test_send(channel=channel, actor=admin_user)
        with caplog.at_level(logging.DEBUG):
            assert delivery_send(delivery_id=delivery.pk) in (DeliveryState.FAILED, DeliveryState.RETRY)
        assert [r["path"] for r in ntfy.received]  # it was really sent, and really refused
    stored = Delivery.objects.get(pk=delivery.pk)
    assert "error=500" in stored.error and "ntfy notification to topic '********'" in stored.error
    assert TOPIC not in stored.error
    assert TOPIC not in "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("notifications"))
    client = Client()
    client.force_login(admin_user)
    page = client.get("/notifications/").content.decode()
    assert "ops-ntfy" in page and "error=500" in page and TOPIC not in page


def test_the_topics_are_what_apprise_reads_from_every_form_of_the_url() -> None:
    """ntfy.sh's own form puts the topic where a host stands (no server to run for it here)."""
    for url in (f"ntfy://{TOPIC}", f"ntfys://ntfy.example/{TOPIC}/second-topic", f"ntfy://h/?to={TOPIC}"):
        assert TOPIC in plugin_secrets(apprise.Apprise.instantiate(url)), url
    assert plugin_secrets(apprise.Apprise.instantiate("json://127.0.0.1:9/hook")) == []
