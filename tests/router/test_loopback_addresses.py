"""Issue 37: the lab router reached the panel machine's own loopback when a host's address was
`0x7f000001` or `::ffff:127.0.0.1` (the check read only `127.0.0.1`, `::1` and `localhost`; `127.1`
passed it and was named in client exports). One rule now judges every address the panel reaches or
hands out by what it is (serving.binds.address_refusal), and the router connects to the address it
judged. Each attack is one of the spellings a resolver reads as this machine."""

from __future__ import annotations

import socket

import pytest
from django.contrib.auth.models import User

from deployments.models import DeploymentRevision
from deployments.services.exports import revision_export
from deployments.services.lab_routes import lab_routes
from hardware.models import Host
from serving.binds import address_refusal, canonical_address, system_resolve
from serving.exports import NotExportable

from .test_lab_routes import serving_host

SPELLINGS = (
    *("127.1", "0x7f000001", "2130706433", "::ffff:127.0.0.1", "::1"),
    *("0.0.0.0", "169.254.1.1", "fe80::1", "localhost"),  # noqa: S104
)


@pytest.mark.parametrize("address", SPELLINGS)
def test_the_rule_refuses_every_spelling_of_this_machine_and_of_the_link(address: str) -> None:
    why = address_refusal(address, resolve=system_resolve)
    assert why.startswith(address) and any(k in why for k in ("loopback", "unspecified", "link-local")), why
    assert address_refusal(f"[{address}]" if ":" in address else address.upper(), resolve=system_resolve)


def test_a_name_is_judged_by_what_it_resolves_to_here() -> None:
    name = socket.gethostname()  # many machines map their own name to 127.0.x.1 in /etc/hosts
    if not any(ip.startswith("127.") for ip in system_resolve(name)):
        pytest.skip(f"{name} does not resolve to loopback on this machine")
    assert "a loopback address" in address_refusal(name, resolve=system_resolve)
    assert "loopback" in address_refusal("panel.localhost")  # RFC 6761: never resolved elsewhere


def test_lan_and_public_addresses_pass_and_legacy_spellings_read_as_the_resolver_reads_them() -> None:
    for fine in ("10.0.0.7", "192.168.1.20", "2001:db8::7", "gpu-box-1.lan", "8.8.8.8"):
        assert address_refusal(fine, resolve=system_resolve) == "", fine
    assert canonical_address("10.7") == "10.0.0.7" and canonical_address("[::FFFF:10.0.0.7]") == "::ffff:a00:7"
    assert address_refusal("::127.0.0.1").startswith("::127.0.0.1 is ::7f00:1, an IPv4-compatible")


@pytest.mark.django_db
@pytest.mark.parametrize("address", SPELLINGS)
def test_the_router_never_routes_to_a_host_whose_address_is_this_machine(address: str, operator: User) -> None:
    """The address as an earlier version stored it from a probe: the table refuses it when read."""
    host = serving_host("far", operator)
    Host.objects.filter(pk=host.pk).update(address=address)
    (door,) = lab_routes().doors
    assert door.url == "" and not door.usable
    assert door.problem.startswith(f"far's address: {address.lower()}") and "an admin sets" in door.problem
    assert lab_routes().routes("chat") == []


@pytest.mark.django_db
@pytest.mark.parametrize("address", SPELLINGS)
def test_no_client_export_names_such_an_address(address: str, operator: User) -> None:
    host = serving_host("far", operator)
    Host.objects.filter(pk=host.pk).update(address=address)
    revision = DeploymentRevision.objects.get(host=host, number=1)
    for target in ("opencode", "hermes", "aider-settings"):
        with pytest.raises(NotExportable, match="runs on another machine and far's address: "):
            revision_export(revision, target)


@pytest.mark.django_db
def test_the_router_connects_to_the_address_it_judged(operator: User) -> None:
    """A legacy spelling of a LAN address is pinned to what it is, so the router's HTTP client never
    resolves the stored text again (a name that answers otherwise a second later gains nothing)."""
    host = serving_host("far", operator)
    Host.objects.filter(pk=host.pk).update(address="10.7")
    (door,) = lab_routes().doors
    assert door.url == "http://10.0.0.7:4000" and door.usable
