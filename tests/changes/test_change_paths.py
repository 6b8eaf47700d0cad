"""Change requests through each door a person uses: the pages (the switch says "Request review",
the request page shows the diff, the planner and the exports, stale in words), the API, the CLI,
and the notifications a host's channels get when a request is opened, approved or rejected."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from api.tokens import token_create
from changes.models import ChangeRequest
from deployments.models import ModelAlias, Operation
from deployments.services.revisions import revision_mark_active
from deployments.services.switch import switch_request
from hardware.review import ChangeRequested
from notifications.models import Delivery
from notifications.services import channel_create, rule_create

pytestmark = pytest.mark.django_db


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_switch_page_asks_for_review_and_posting_it_opens_the_request(protected, operator):
    client = _signed_in(operator)
    page = client.get("/hosts/guarded/revisions/2/switch/").content.decode()
    assert "Request review" in page and "Switch now" not in page
    response = client.post("/hosts/guarded/revisions/2/switch/", {"override_reason": ""})
    change = ChangeRequest.objects.get()
    assert response.status_code == 302 and response.url == f"/changes/{change.pk}/"
    assert Operation.objects.count() == 0
    host_page = client.get("/hosts/guarded/").content.decode()
    assert "review required" in host_page and "1 pending request" in host_page


def test_the_request_page_shows_diff_planner_exports_and_staleness(protected, operator, reviewer):
    with pytest.raises(ChangeRequested) as caught:
        switch_request(revision=protected["r"][2], actor=operator)
    url = f"/changes/{caught.value.change.pk}/"
    page = _signed_in(reviewer).get(url).content.decode()
    assert "Against what runs now" in page and "ctx_size" in page  # r1 -> r2 changes the context
    assert "planner-report" in page and "Exports that would change" in page
    assert "start-script" in page and "Approve and run" in page and "Stale" not in page
    revision_mark_active(revision=protected["r"][3], actor=None)
    page = _signed_in(reviewer).get(url).content.decode()
    assert "Stale:" in page and "the active revision is r3 now (was r1)" in page and "Approve and run" not in page
    author_page = _signed_in(operator).get(url).content.decode()
    assert "Re-confirm" in author_page and "Approve and run" not in author_page


def test_deciding_on_the_page(protected, operator, reviewer, viewer):
    with pytest.raises(ChangeRequested) as caught:
        switch_request(revision=protected["r"][2], actor=operator)
    decide = f"/changes/{caught.value.change.pk}/decide/"
    assert _signed_in(viewer).post(decide, {"verdict": "approve"}).status_code == 403
    own = _signed_in(operator).post(decide, {"verdict": "approve"})
    assert own.status_code == 403  # its author: told who decides, not sent to ask for a role that would not help
    assert "another operator or admin decides it" in own.content.decode()
    assert "role with more rights" not in own.content.decode()
    assert "role with more rights" in _signed_in(viewer).post(decide, {"verdict": "approve"}).content.decode()
    assert Operation.objects.count() == 0
    response = _signed_in(reviewer).post(decide, {"verdict": "approve", "comment": "ok"})
    assert response.status_code == 302
    op = Operation.objects.get()
    assert op.requested_by == operator and op.params["approved_by"] == "olga"


def _api(client: Client, user: Any, method: str, path: str, body: Any = None) -> Any:
    token = token_create(user=user, name="t", actor=user).secret
    kwargs = {"data": json.dumps(body), "content_type": "application/json"} if body is not None else {}
    return getattr(client, method)(path, HTTP_AUTHORIZATION=f"Bearer {token}", **kwargs)


def test_the_api_opens_lists_approves_and_rejects(client, protected, operator, reviewer, viewer):
    switched = _api(client, operator, "post", "/api/v1/hosts/guarded/switch/", {"revision": 2})
    assert switched.status_code == 202 and Operation.objects.count() == 0
    first = switched.json()["change_request"]
    assert first["state"] == "open" and first["author"] == "otto" and first["stale"] == []
    opened = _api(
        client, operator, "post", "/api/v1/changes/", {"host": "guarded", "kind": "alias", "revision": 1, "name": "c"}
    )
    assert opened.status_code == 201 and opened.json()["kind"] == "alias"
    listed = _api(client, viewer, "get", "/api/v1/changes/?host=guarded").json()
    assert [c["id"] for c in listed["items"]] == [opened.json()["id"], first["id"]]
    approve = f"/api/v1/changes/{first['id']}/approve/"
    assert _api(client, operator, "post", approve, {}).status_code == 403  # its author
    assert _api(client, viewer, "post", approve, {}).status_code == 403
    approved = _api(client, reviewer, "post", approve, {"comment": "go"})
    assert approved.status_code == 200 and approved.json()["state"] == "approved"
    assert Operation.objects.get().pk.hex == approved.json()["operation"].replace("-", "")
    rejected = _api(client, reviewer, "post", f"/api/v1/changes/{opened.json()['id']}/reject/", {})
    assert rejected.json()["state"] == "rejected" and not ModelAlias.objects.exists()
    bad = _api(client, operator, "post", "/api/v1/changes/", {"host": "guarded", "kind": "reboot", "revision": 1})
    assert bad.status_code == 400 and ChangeRequest.objects.count() == 2


def _cli(*args: str) -> str:
    out = io.StringIO()
    call_command("change", *args, stdout=out)
    return out.getvalue()


def test_the_cli_opens_lists_approves_and_rejects(protected, operator, reviewer):
    opened = _cli("open", "--host", "guarded", "--kind", "switch", "--revision", "2", "--user", "otto")
    change = ChangeRequest.objects.get()
    assert opened.startswith(f"Opened change request #{change.pk}: Switch guarded to r2")
    assert f"#{change.pk}\tguarded\topen\totto" in _cli("list")
    with pytest.raises(CommandError, match="own request"):
        _cli("approve", str(change.pk), "--user", "otto")
    done = _cli("approve", str(change.pk), "--user", "olga", "--comment", "fine")
    op = Operation.objects.get()
    assert done == f"Request #{change.pk}: approved. Operation {op.pk} queued.\n"
    _cli("open", "--host", "guarded", "--kind", "alias", "--revision", "1", "--name", "coder", "--user", "otto")
    second = ChangeRequest.objects.get(kind="alias")
    assert _cli("reject", str(second.pk), "--user", "olga").startswith(f"Request #{second.pk}: rejected")
    assert not ModelAlias.objects.exists()
    switched = io.StringIO()  # the switch command on a protected host opens a request, exit 0
    call_command("switch", "--host", "guarded", "--revision", "3", "--user", "otto", stdout=switched)
    assert "requires review" in switched.getvalue() and ChangeRequest.objects.count() == 3


def test_the_hosts_channels_hear_of_requests_opened_approved_and_rejected(
    protected, operator, reviewer, admin_user, settings, django_capture_on_commit_callbacks
):
    settings.NOTIFICATIONS_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the channel's webhook is on this machine
    channel = channel_create(name="ops", url="json://127.0.0.1:9/", actor=admin_user)
    events = ["change.opened", "change.approved", "change.rejected"]
    rule_create(channel=channel, host=protected["host"], events=events, actor=admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        _cli("open", "--host", "guarded", "--kind", "switch", "--revision", "2", "--user", "otto")
        _cli("open", "--host", "guarded", "--kind", "switch", "--revision", "3", "--user", "otto")
    first, second = ChangeRequest.objects.order_by("pk")
    with django_capture_on_commit_callbacks(execute=True):
        _cli("reject", str(second.pk), "--user", "olga")
        _cli("approve", str(first.pk), "--user", "olga")
    sent = list(Delivery.objects.order_by("created_at").values_list("event", "title", "body"))
    assert [e for e, *_ in sent] == ["change.opened", "change.opened", "change.rejected", "change.approved"]
    assert set(Delivery.objects.values_list("host_name", flat=True)) == {"guarded"}
    assert f"Change request #{first.pk} on guarded approved by olga" in sent[-1][1] + sent[-1][2]


def test_the_front_door_forms_ask_for_review_and_change_nothing(protected, operator):
    client = _signed_in(operator)
    assert "Request review" in client.get("/hosts/guarded/front-door/").content.decode()
    response = client.post("/hosts/guarded/front-door/aliases/", {"name": "coder", "revision": "1"}, follow=True)
    assert "requires review: change request #" in response.content.decode()
    assert not ModelAlias.objects.exists() and ChangeRequest.objects.get().kind == "alias"
