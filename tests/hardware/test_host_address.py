"""Issue 37: a host's address came from its agent's first probe, so a host (or whoever holds its
token) chose where the lab router and the exports point, the panel's own loopback included. Now
the probe's address is a suggestion shown to admins, and only an admin sets the address (the host
page, `manage.py host address`), through the one loopback rule, audited."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from core.models import AuditEvent
from deployments.services.lab_routes import lab_routes
from hardware.credentials import host_token_issue
from hardware.models import Host
from tests.router.test_lab_routes import serving_host

pytestmark = pytest.mark.django_db
SPELLINGS = ("0x7f000001", "::ffff:127.0.0.1", "127.1", "2130706433", "localhost", "169.254.169.254")


def _register(token: str, address: str) -> int:
    body = {"facts": {"address": address}, "inventory": {"gpus": []}, "engine_state": {}}
    return (
        Client()
        .post(
            "/agent/v1/register",
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        .status_code
    )


def _set(client: Client, name: str, address: str) -> str:
    answer = client.post(reverse("hardware:host_address", args=[name]), {"address": address}, follow=True)
    return answer.content.decode()


@pytest.mark.parametrize("address", SPELLINGS)
def test_a_probe_reporting_this_machine_does_not_become_the_routed_address(address: str, operator: User) -> None:
    host = serving_host("far", operator)  # its admin set 10.0.0.3; its door serves `chat`
    _, token = host_token_issue(name="far", actor=None)
    assert _register(token, address) == 200
    assert Host.objects.get(pk=host.pk).address == "10.0.0.3"
    (door,) = lab_routes().doors
    assert door.url == "http://10.0.0.3:4000" and door.usable


def test_a_new_hosts_first_probe_sets_no_address_either(operator: User) -> None:
    host, token = host_token_issue(name="fresh", actor=None)
    assert _register(token, "0x7f000001") == 200
    host.refresh_from_db()
    assert host.address == "127.0.0.1" and host.last_probe_at  # the unset default, which nothing routes to


def test_an_admin_sets_the_address_an_operator_cannot(client: Client, admin_user: User, operator: User) -> None:
    host, token = host_token_issue(name="far", actor=None)
    assert _register(token, "far.lan") == 200
    client.force_login(operator)
    assert client.post(reverse("hardware:host_address", args=["far"]), {"address": "10.0.0.9"}).status_code == 403
    assert 'id="host-address"' not in client.get(reverse("hardware:host_detail", args=["far"])).content.decode()
    assert Host.objects.get(pk=host.pk).address == "127.0.0.1"

    client.force_login(admin_user)
    page = client.get(reverse("hardware:host_detail", args=["far"])).content.decode()
    assert '<code id="reported-address">far.lan</code>' in page  # the agent's suggestion, not used
    page = _set(client, "far", " 10.9 ")
    assert "far&#x27;s address is now 10.0.0.9." in page
    assert Host.objects.get(pk=host.pk).address == "10.0.0.9"
    event = AuditEvent.objects.get(host=host, action="host.address")
    assert (event.actor.username, event.data) == ("ada", {"before": "127.0.0.1", "after": "10.0.0.9"})


REFUSED = (*SPELLINGS, "::1", "0.0.0.0", "fe80::1", "http://10.0.0.9", "10.0.0.9:80", "a b", "")  # noqa: S104


@pytest.mark.parametrize("address", REFUSED)
def test_an_admin_cannot_set_this_machine_or_what_is_not_an_address(
    client: Client, admin_user: User, address: str
) -> None:
    host = Host.objects.create(name="far", address="10.0.0.9", queue="host.far")
    client.force_login(admin_user)
    page = _set(client, "far", address)
    assert "Address not changed:" in page
    assert Host.objects.get(pk=host.pk).address == "10.0.0.9"
    assert not AuditEvent.objects.filter(action="host.address").exists()


def test_the_command_sets_the_address_through_the_same_rule(db: Any) -> None:
    Host.objects.create(name="far", address="127.0.0.1", queue="host.far")
    out = io.StringIO()
    call_command("host", "address", "far", "10.0.0.9", stdout=out)
    assert "far's address is 10.0.0.9." in out.getvalue()
    with pytest.raises(CommandError, match="is 127.0.0.1, a loopback address"):
        call_command("host", "address", "far", "0x7f000001")
    assert Host.objects.get(name="far").address == "10.0.0.9"


def test_the_django_admin_shows_the_address_but_cannot_change_it(client: Client, django_user_model: Any) -> None:
    host = Host.objects.create(name="far", address="10.0.0.9", queue="host.far")
    client.force_login(django_user_model.objects.create_superuser("root", password="pw-root-1"))
    page = client.get(f"/admin/hardware/host/{host.pk}/change/").content.decode()
    assert "10.0.0.9" in page and 'name="address"' not in page


def test_the_panels_own_host_follows_the_lan_setting_at_each_hello_audited(settings: Any, db: Any) -> None:
    """CONTROLPANEL_LAN_ADDRESS: the host the embedded agent registers (this machine) takes it as its
    address at its hello, as an admin's own change is recorded; another host's hello changes nothing."""
    from hostagent.probe import local_host_name

    settings.LAN_ADDRESS = "10.213.7.1"
    here, token = host_token_issue(name=local_host_name(), actor=None)
    far, far_token = host_token_issue(name="far-away", actor=None)
    assert _register(token, "127.0.0.1") == 200 and _register(far_token, "10.213.7.1") == 200
    assert Host.objects.get(pk=here.pk).address == "10.213.7.1"
    assert Host.objects.get(pk=far.pk).address == "127.0.0.1"
    event = AuditEvent.objects.get(host=here, action="host.address")
    assert event.actor is None and event.data == {"before": "127.0.0.1", "after": "10.213.7.1"}

    assert _register(token, "127.0.0.1") == 200  # the next hello: nothing to change, nothing recorded
    assert AuditEvent.objects.filter(action="host.address").count() == 1

    settings.LAN_ADDRESS = ""  # unset again: the address an admin (or the setting) gave it is kept
    assert _register(token, "127.0.0.1") == 200
    assert Host.objects.get(pk=here.pk).address == "10.213.7.1"


def test_register_local_takes_the_lan_setting_as_this_machines_address(settings: Any, db: Any) -> None:
    settings.LAN_ADDRESS = "10.213.7.1"
    call_command("host", "register-local", stdout=io.StringIO())
    host = Host.objects.get()
    assert host.address == "10.213.7.1"
    assert AuditEvent.objects.get(host=host, action="host.address").data["after"] == "10.213.7.1"


def test_the_host_page_of_the_panels_own_machine_names_the_lan_setting(client: Client, admin_user: User) -> None:
    from hostagent.probe import local_host_name

    here = Host.objects.create(name=local_host_name(), address="127.0.0.1", queue="host.here")
    Host.objects.create(name="far-away", address="10.0.0.9", queue="host.far-away")
    client.force_login(admin_user)
    page = client.get(reverse("hardware:host_detail", args=[here.name])).content.decode()
    assert 'id="lan-setting"' in page and "<code>CONTROLPANEL_LAN_ADDRESS</code> sets its address" in page
    assert 'id="lan-setting"' not in client.get(reverse("hardware:host_detail", args=["far-away"])).content.decode()
