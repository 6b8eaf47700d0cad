"""Where channels may send: never to loopback, link-local (the cloud metadata service), private,
unspecified, multicast or reserved addresses, in any spelling, unless
CONTROLPANEL_NOTIFY_ALLOWED_NETWORKS lists the network; checked when a channel is saved, again
before each send, and on every connection a send makes. A send that fails on the way stores one
sentence whatever the port's state.

Real sends through Apprise to real local servers (tests.support.receivers); 127.0.0.2 is a second
loopback address of the same machine (Linux answers on all of 127.0.0.0/8)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from notifications.addresses import guarded
from notifications.channels import UNREACHABLE, ChannelUrlError, channel_check, channel_send
from notifications.choices import DeliveryState
from notifications.models import Channel
from notifications.services import channel_create, channel_test_send, channel_update, delivery_send
from tests.support.panel import ROOT
from tests.support.receivers import SilentReceiver, SmtpServer, WebhookReceiver, free_port

SETTING = "CONTROLPANEL_NOTIFY_ALLOWED_NETWORKS"
FORBIDDEN = [
    ("json://127.0.0.1:8080/hook", "127.0.0.1 is a loopback"),
    ("json://localhost:8080/hook", "is a loopback"),  # a name is judged by what it resolves to
    ("json://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address (the cloud metadata"),
    ("jsons://[fe80::1]/hook", "fe80::1 is a link-local"),
    ("json://10.1.2.3/hook", "10.1.2.3 is a private"),
    ("json://172.16.0.1/hook", "172.16.0.1 is a private"),
    ("form://192.168.1.10/hook", "192.168.1.10 is a private"),
    ("json://[fd00::1]/hook", "fd00::1 is a private"),
    ("json://0.0.0.0:8080/", "0.0.0.0 is an unspecified"),
    ("json://[::]:8080/", ":: is an unspecified"),
    ("json://224.0.0.1/", "224.0.0.1 is a multicast"),
    ("json://240.0.0.1/", "240.0.0.1 is a reserved"),
    ("json://[::ffff:127.0.0.1]/hook", "127.0.0.1 is a loopback"),  # IPv4-mapped IPv6
    ("json://[::ffff:a9fe:a9fe]/", "169.254.169.254 is a link-local"),
    ("json://2130706433:8080/", "127.0.0.1 is a loopback"),  # decimal
    ("json://017700000001:8080/", "127.0.0.1 is a loopback"),  # octal
    ("json://0x7f000001:8080/", "127.0.0.1 is a loopback"),  # hex
    ("json://[2002:7f00:1::1]/hook", "127.0.0.1 is a loopback"),  # 6to4, relayed to 127.0.0.1
    ("json://[64:ff9b::a9fe:a9fe]/hook", "169.254.169.254 is a link-local"),  # NAT64
    ("json://100.64.0.1/hook", "100.64.0.1 is a non-public"),  # carrier-grade NAT
    ("mailtos://ops:pw@lab.example?smtp=10.0.0.5&to=ops@lab.example", "10.0.0.5 is a private"),  # SMTP host
    ("gotify://192.168.1.20/AbCdEfGhIjKlMnO", "192.168.1.20 is a private"),
    ("matrixs://bot:pw@10.0.0.2/#ops", "10.0.0.2 is a private"),
    ("ntfy://10.0.0.1/lab-alerts", "10.0.0.1 is a private"),
    ("mmost://10.1.1.1/abcdefghijklmnopqrstuvwxyz", "10.1.1.1 is a private"),
]


@pytest.fixture
def allowed(settings: Any) -> Any:
    def allow(*networks: str) -> None:
        settings.NOTIFICATIONS_ALLOWED_NETWORKS = list(networks)

    allow()  # nothing internal, whatever the environment says
    return allow


@pytest.mark.parametrize(("url", "why"), FORBIDDEN)
def test_an_internal_address_is_refused_when_a_channel_is_saved(url, why, allowed, admin_user, db):
    with pytest.raises(ValidationError) as refused:
        channel_create(name="probe", url=url, actor=admin_user)
    said = refused.value.message_dict["url"][0]
    assert why in said and SETTING in said
    assert not Channel.objects.exists()


def test_the_form_says_which_setting_allows_internal_networks_and_saves_nothing(allowed, admin_user, db):
    client = Client()
    client.force_login(admin_user)
    response = client.post(
        "/notifications/channels/new/",
        {"name": "metadata", "url": "json://169.254.169.254/latest/meta-data/", "enabled": "on"},
    )
    page = response.content.decode()
    assert response.status_code == 400 and SETTING in page and "cloud metadata service" in page
    assert not Channel.objects.exists()

    allowed("127.0.0.0/8")
    channel = channel_create(name="lab", url="json://127.0.0.1:9/hook", actor=admin_user)
    allowed()
    response = client.post(
        f"/notifications/channels/{channel.pk}/", {"name": "lab", "url": "json://[::ffff:10.0.0.9]/", "enabled": "on"}
    )
    assert response.status_code == 400 and SETTING in response.content.decode()
    channel.refresh_from_db()
    assert channel.url_ciphertext == Channel.objects.get().url_ciphertext and channel.name == "lab"
    with pytest.raises(ValidationError, match=SETTING):
        channel_update(channel=channel, name="lab", url="json://localhost/", enabled=True, actor=admin_user)


def test_public_addresses_and_the_internal_networks_the_admin_allows_are_accepted_and_only_those(allowed):
    allowed("10.0.5.0/24", "192.168.1.10/32", "127.0.0.0/8")
    for url in (
        "json://10.0.5.7/hook",
        "json://192.168.1.10/hook",
        "json://[::ffff:10.0.5.7]/hook",  # the same address, IPv4-mapped
        "json://2130706433:8080/",
        "json://localhost:8080/",
        "mailto://ops:pw@lab.example?smtp=10.0.5.8&to=ops@lab.example",
    ):
        assert channel_check(url).scheme in ("json", "mailto"), url
    for url in ("json://192.168.1.11/hook", "json://10.0.6.1/hook", "json://169.254.169.254/"):
        with pytest.raises(ChannelUrlError, match=SETTING):
            channel_check(url)
    # Public addresses need no setting; nor do services that send only to their own public host
    # (the "host" of these URLs is a token).
    assert channel_check("json://93.184.215.14/hook").service == "JSON"
    assert channel_check("jsons://[2606:4700::6810:84e5]/hook").service == "JSON"
    assert channel_check("discord://1234567890/abcdefghijklmnopqrstuvwxyz").scheme == "discord"
    assert channel_check("tgram://123456789:abcdefghijklmnopqrstuvwxyz0123456789/10.0.0.1").scheme == "tgram"


def test_a_wrong_setting_stops_the_panel_with_a_clear_error():
    env = {**os.environ, SETTING: "10.0.5.0/24,10.0.5.300/32", "DJANGO_SETTINGS_MODULE": "controlpanel.settings"}
    run = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert run.returncode != 0 and f"{SETTING} lists addresses or networks" in run.stderr and "10.0.5.300" in run.stderr


# --- at delivery time ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_saved_channel_whose_host_now_resolves_to_a_forbidden_address_gets_nothing(allowed, admin_user):
    """Saved while the lab allowed loopback; since then the address is no longer allowed (as when
    the name was moved to an internal address after it was checked): the delivery is refused
    before anything is sent, and says why."""
    with WebhookReceiver() as hook:
        allowed("127.0.0.0/8")
        channel = channel_create(name="ops", url=f"json://localhost:{hook.port}/hook", actor=admin_user)
        allowed()
        delivery = channel_test_send(channel=channel, actor=admin_user)
        assert delivery_send(delivery_id=delivery.pk) == DeliveryState.FAILED
    delivery.refresh_from_db()
    assert "is a loopback address" in delivery.error and SETTING in delivery.error
    assert hook.received == []


def test_a_redirect_to_an_address_not_allowed_is_not_followed(allowed):
    """Every connection of a send is checked as it is made: the allowed receiver's redirect to
    another loopback address (a rebinding name would look the same) reaches nothing there."""
    allowed("127.0.0.1/32")
    with WebhookReceiver(host="127.0.0.2") as inner:
        with WebhookReceiver(status=307, location=f"http://127.0.0.2:{inner.port}/inner") as outer:
            result = channel_send(f"json://127.0.0.1:{outer.port}/hook", title="t", body="b")
        assert len(outer.received) == 1
    assert not result.delivered
    assert "127.0.0.2 is a loopback address" in result.error and SETTING in result.error
    assert inner.received == []
    allowed("127.0.0.0/8")  # the same redirect, allowed: followed
    with WebhookReceiver(host="127.0.0.2") as inner:
        with WebhookReceiver(status=307, location=f"http://127.0.0.2:{inner.port}/inner") as outer:
            assert channel_send(f"json://127.0.0.1:{outer.port}/hook", title="t", body="b").delivered
        assert [r["path"] for r in inner.received] == ["/inner"]


def test_an_open_port_and_a_closed_port_fail_with_the_same_sentence(allowed, caplog):
    """A closed port, a port that accepts and never answers, and a port that speaks another
    protocol (SMTP) all store one sentence; the panel's log keeps what happened (masked)."""
    allowed("127.0.0.0/8")
    caplog.set_level(logging.WARNING, logger="notifications.channels")
    password = "hunter2-pass"

    def send(port: int) -> Any:
        return channel_send(f"json://u:{password}@127.0.0.1:{port}/hook?cto=2&rto=2", title="t", body="b")

    errors = {"closed": send(free_port())}
    with SilentReceiver() as silent:
        errors["silent"] = send(silent.port)
    with SmtpServer() as smtp:
        errors["smtp"] = send(smtp.port)
    mail_to = "?from=panel@lab.example&to=ops@lab.example&mode=insecure"
    errors["mail-closed"] = channel_send(f"mailto://127.0.0.1:{free_port()}{mail_to}", title="t", body="b")
    assert {k: (r.delivered, r.error) for k, r in errors.items()} == {k: (False, UNREACHABLE) for k in errors}
    logged = caplog.text
    assert "Connection refused" in logged and "timed out" in logged.lower() and password not in logged
    # An HTTP status is the receiver's own answer (a wrong token, a wrong path): it is kept.
    with WebhookReceiver(status=404) as hook:
        answered = channel_send(f"json://127.0.0.1:{hook.port}/hook", title="t", body="b")
    assert not answered.delivered and "error=404" in answered.error


def test_the_guard_holds_only_the_sending_thread():
    """While one thread sends, the worker's other threads (its broker and database connections)
    look names up as before."""
    inside: dict[str, Any] = {}
    entered, done = threading.Event(), threading.Event()

    def send() -> None:
        with guarded([]):
            entered.set()
            try:
                socket.getaddrinfo("localhost", 80)
            except socket.gaierror as exc:
                inside["refused"] = str(exc)
            done.wait(5)

    thread = threading.Thread(target=send)
    thread.start()
    entered.wait(5)
    outside = socket.getaddrinfo("localhost", 80)
    done.set()
    thread.join(5)
    assert "address policy" in inside["refused"] and outside
