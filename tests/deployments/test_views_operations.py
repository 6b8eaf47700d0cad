"""Operation page: live status and the cancel button."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.models import AuditEvent
from deployments.models import Operation
from tests.deployments.test_views_revisions import make_lab

pytestmark = pytest.mark.django_db


def _op(host, operator, state: str) -> Operation:
    return Operation.objects.create(kind="switch", host=host, state=state, requested_by=operator, log="starting\n")


def test_operation_page_has_a_cancel_button_for_operators_only(client, catalog, operator, viewer):
    host, _ = make_lab(operator)
    op = _op(host, operator, "running")
    client.force_login(operator)
    page = client.get(reverse("deployments:operation_detail", args=[op.pk])).content.decode()
    assert reverse("deployments:operation_cancel", args=[op.pk]) in page
    assert 'hx-trigger="every 1s"' in page and "starting" in page
    client.force_login(viewer)
    page = client.get(reverse("deployments:operation_detail", args=[op.pk])).content.decode()
    assert reverse("deployments:operation_cancel", args=[op.pk]) not in page


def test_cancel_confirmation_fragment(client, catalog, operator):
    host, _ = make_lab(operator)
    op = _op(host, operator, "running")
    client.force_login(operator)
    body = client.get(reverse("deployments:operation_cancel", args=[op.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in body and "Cancel the operation" in body


def test_cancel_a_queued_operation(client, catalog, operator):
    host, _ = make_lab(operator)
    op = _op(host, operator, "queued")
    client.force_login(operator)
    response = client.post(reverse("deployments:operation_cancel", args=[op.pk]), HTTP_HX_REQUEST="true")
    assert response["HX-Redirect"] == reverse("deployments:operation_detail", args=[op.pk])
    op.refresh_from_db()
    assert op.state == "cancelled"
    assert AuditEvent.objects.filter(action="operation.cancel").count() == 1


def test_cancel_a_running_operation_asks_it_to_stop(client, catalog, operator):
    host, _ = make_lab(operator)
    op = _op(host, operator, "running")
    client.force_login(operator)
    response = client.post(reverse("deployments:operation_cancel", args=[op.pk]))
    assert response.status_code == 302
    op.refresh_from_db()
    assert op.state == "running" and op.cancel_requested
    status = client.get(reverse("deployments:operation_status", args=[op.pk]))
    assert status.status_code == 200 and "cancel requested" in status.content.decode()


def test_cancel_an_ended_operation_is_a_message(client, catalog, operator):
    host, _ = make_lab(operator)
    op = _op(host, operator, "succeeded")
    client.force_login(operator)
    response = client.post(reverse("deployments:operation_cancel", args=[op.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert "already ended" in response.content.decode()
    assert not AuditEvent.objects.filter(action="operation.cancel").exists()


def test_status_stops_polling_when_done(client, catalog, operator):
    host, _ = make_lab(operator)
    op = _op(host, operator, "failed")
    client.force_login(operator)
    assert client.get(reverse("deployments:operation_status", args=[op.pk])).status_code == 286


def test_viewer_cannot_cancel(client, catalog, operator, viewer):
    host, _ = make_lab(operator)
    op = _op(host, operator, "queued")
    client.force_login(viewer)
    assert client.post(reverse("deployments:operation_cancel", args=[op.pk])).status_code == 403
    op.refresh_from_db()
    assert op.state == "queued"
