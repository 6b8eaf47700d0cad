"""Exports that name a loopback URL say, visibly, that they work on the panel's own machine only
(issue 41): the exports page beside the base URL, and `manage.py export`'s notes."""

from __future__ import annotations

import pytest
from django.urls import reverse

from deployments.models import DeploymentRevision
from deployments.services.exports import revision_export
from hardware.models import Host
from hostagent.probe import local_host_name
from tests.deployments.test_views_revisions import make_lab

pytestmark = pytest.mark.django_db
SAID = "is a loopback address: these configs work on the panel&#x27;s own machine only"


def test_a_loopback_export_carries_a_warning_and_a_lan_one_none(client, catalog, operator, viewer):
    here = local_host_name()  # the panel's own machine: a loopback address reaches it here, and only here
    host, _ = make_lab(operator, name=here)
    client.force_login(viewer)
    page = client.get(reverse("deployments:revision_exports", args=[here, 1])).content.decode()
    assert f"http://{here}.lan:8001/v1" in page and 'id="export-loopback"' not in page

    Host.objects.filter(pk=host.pk).update(address="127.0.0.1")  # CONTROLPANEL_LAN_ADDRESS unset
    page = client.get(reverse("deployments:revision_exports", args=[here, 1])).content.decode()
    assert 'id="export-loopback"' in page and f"http://127.0.0.1:8001/v1 {SAID}" in page
    assert "CONTROLPANEL_LAN_ADDRESS" in page

    revision = DeploymentRevision.objects.get(host=host, number=1)
    notes = revision_export(revision, "opencode").notes
    assert any(n.startswith("warning: http://127.0.0.1:8001/v1 is a loopback address") for n in notes), notes
