"""Scheduling from where a change is made (the switch confirmation, the alias form, the commands),
the calendar-like list, cancelling, and a host's maintenance window on its page."""

from __future__ import annotations

from datetime import time, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from deployments.models import ModelAlias, Operation
from deployments.services.serving_set import serving_mode_set
from schedules.models import MaintenanceWindow, ScheduledChange
from schedules.services import change_schedule, changes_run_due, window_set
from tests.deployments.test_views_revisions import add_revision, make_lab

pytestmark = pytest.mark.django_db
AT = "2026-12-05T02:00"  # what the browser's date-and-time field sends (read as UTC)


@pytest.fixture
def lab(catalog, operator):
    host, r1 = make_lab(operator)
    return {"host": host, "r1": r1, "r2": add_revision(host, operator, message="r2", port=8002)}


def _future(hours: int = 30) -> str:
    return (timezone.now() + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M")


def test_the_switch_page_offers_to_schedule_and_a_scheduled_switch_queues_nothing_now(client, lab, operator):
    client.force_login(operator)
    url = reverse("deployments:revision_switch", args=["lab", 2])
    page = client.get(url).content.decode()
    assert "Switch now" in page and "Or schedule it" in page and 'name="at"' in page
    assert "lab has none" in page  # no window yet: the window choice says so, and links to set one
    response = client.post(url, {"when": "at", "at": _future()})
    assert response.status_code == 302 and response.url == reverse("schedules:list") + "?host=lab"
    change = ScheduledChange.objects.get()
    assert (change.kind, change.params, change.created_by) == ("switch", {"revision": 2}, operator)
    assert not Operation.objects.filter(kind="switch").exists()
    listing = client.get(response.url).content.decode()
    assert "switch to r2" in listing and "otto" in listing and change.run_at.strftime("%Y-%m-%d") in listing
    assert f"Switch to r2 scheduled for {change.run_at:%Y-%m-%d %H:%M} UTC." in listing


@pytest.mark.parametrize(
    "body,message",
    [
        ({"when": "window"}, "no maintenance window"),
        ({"when": "at", "at": ""}, "Give the date and time"),
        ({"when": "at", "at": "tomorrow-ish"}, "not a date and time"),
        ({"when": "at", "at": "2020-01-01T00:00"}, "in the past"),
    ],
)
def test_a_bad_schedule_on_the_switch_page_says_why_and_stores_nothing(client, lab, operator, body, message):
    client.force_login(operator)
    response = client.post(reverse("deployments:revision_switch", args=["lab", 2]), body)
    assert response.status_code == 200 and message in response.content.decode()
    assert not ScheduledChange.objects.exists() and not Operation.objects.filter(kind="switch").exists()


def test_the_alias_form_schedules_a_move_in_the_next_window(client, lab, operator):
    host = lab["host"]
    serving_mode_set(revision=lab["r2"], mode="on-demand", idle_ttl_s=None, actor=operator)
    window_set(host=host, weekdays=[5], start=time(2), end=time(4), tz="Europe/Berlin", actor=operator)
    client.force_login(operator)
    fragment = client.get(reverse("deployments:host_front_door", args=["lab"])).content.decode()
    assert 'value="window"' in fragment and "opens Sat" in fragment
    client.post(
        reverse("deployments:host_alias_set", args=["lab"]), {"name": "coder", "revision": "2", "when": "window"}
    )
    change = ScheduledChange.objects.get()
    assert change.kind == "alias" and change.in_window and change.params == {"name": "coder", "revision": 2}
    assert not ModelAlias.objects.filter(host=host).exists()  # nothing moved yet
    page = client.get(reverse("hardware:host_detail", args=["lab"])).content.decode()
    assert "Sat 02:00-04:00 Europe/Berlin" in page and "move alias coder to r2" in page


def test_the_list_groups_by_day_and_only_operators_may_cancel(client, lab, operator, viewer):
    first = change_schedule(
        kind="switch", host=lab["host"], params={"revision": 2}, at=timezone.now() + timedelta(days=1), actor=operator
    )
    change_schedule(
        kind="switch", host=lab["host"], params={"revision": 1}, at=timezone.now() + timedelta(days=2), actor=operator
    )
    client.force_login(viewer)
    page = client.get(reverse("schedules:list")).content.decode()
    assert page.count('class="schedule-day"') == 2 and "Cancel" not in page
    assert client.post(reverse("schedules:cancel", args=[first.pk])).status_code == 403
    client.force_login(operator)
    assert page.index("switch to r2") < page.index("switch to r1")
    assert "Cancel" in client.get(reverse("schedules:list")).content.decode()
    client.post(reverse("schedules:cancel", args=[first.pk]))
    first.refresh_from_db()
    assert first.state == "cancelled"
    page = client.get(reverse("schedules:list")).content.decode()
    assert page.count('class="schedule-day"') == 1 and "Cancelled by otto" in page


def test_a_change_that_ran_links_its_operation(client, lab, operator):
    change = change_schedule(kind="switch", host=lab["host"], params={"revision": 2}, at=timezone.now(), actor=operator)
    changes_run_due()
    change.refresh_from_db()
    client.force_login(operator)
    page = client.get(reverse("schedules:list") + "?host=lab").content.decode()
    assert reverse("deployments:operation_detail", args=[change.operation_id]) in page and "Ran" in page


def test_the_window_page_saves_refuses_and_removes(client, lab, operator, viewer):
    url = reverse("schedules:window", args=["lab"])
    good = {"weekdays": ["5", "6"], "start": "23:00", "end": "01:00", "timezone": "Europe/Berlin"}
    client.force_login(viewer)
    assert client.post(url, good).status_code == 403 and not MaintenanceWindow.objects.exists()
    client.force_login(operator)
    bad = client.post(url, {**good, "timezone": "Mars/Olympus"})
    assert bad.status_code == 200 and "not a time zone" in bad.content.decode()
    assert not MaintenanceWindow.objects.exists()
    client.post(url, good)
    window = MaintenanceWindow.objects.get()
    assert (window.weekdays, window.start, window.end) == ([5, 6], time(23), time(1))
    assert "Sat, Sun 23:00-01:00 (next day) Europe/Berlin" in client.get(url).content.decode()
    client.post(url, {"remove": "1"})
    assert not MaintenanceWindow.objects.exists()


def test_commands_schedule_list_and_cancel(lab, operator):
    out = StringIO()
    call_command("switch", "--host", "lab", "--revision", "2", "--at", _future() + "Z", "--user", "otto", stdout=out)
    change = ScheduledChange.objects.get()
    assert f"Scheduled #{change.pk}: lab switch to r2" in out.getvalue()
    window_set(host=lab["host"], weekdays=list(range(7)), start=time(3), end=time(4), tz="UTC", actor=operator)
    serving_mode_set(revision=lab["r2"], mode="on-demand", idle_ttl_s=None, actor=operator)
    call_command("alias", "set", "coder", "--host", "lab", "--revision", "2", "--window", stdout=out)
    listing = StringIO()
    call_command("schedule", "list", "--host", "lab", stdout=listing)
    assert "switch to r2\tby otto" in listing.getvalue() and "move alias coder to r2 (window)" not in listing.getvalue()
    assert "(window)\tlab\tmove alias coder to r2\tby the panel" in listing.getvalue()
    call_command("schedule", "cancel", str(change.pk), "--user", "otto", stdout=out)
    assert ScheduledChange.objects.get(pk=change.pk).state == "cancelled"
    with pytest.raises(CommandError, match="already cancelled"):
        call_command("schedule", "cancel", str(change.pk), stdout=out)
    with pytest.raises(CommandError, match="not a date and time"):
        call_command("switch", "--host", "lab", "--revision", "2", "--at", "soon", stdout=out)
    assert not Operation.objects.filter(kind="switch").exists() and ScheduledChange.objects.count() == 2


def _api(client, token: str, body: object):
    import json

    return client.post(
        "/api/v1/schedules/",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


@pytest.mark.parametrize(
    "change,status,message",
    [
        ({"at": "2026-12-05T02:00"}, 400, "time zone"),
        ({"at": "nan"}, 400, "valid datetime"),
        ({"at": "1e309"}, 400, "valid datetime"),
        ({"revision": -1}, 400, "greater than or equal to 1"),
        ({"revision": 9}, 400, "no revision r9"),
        ({"kind": "rollout"}, 400, "'switch' or 'alias'"),
        ({"host": "../../etc"}, 404, "No host"),
        ({"kind": "alias", "name": "<script>x</script>"}, 400, "lower-case"),
        ({"window": True}, 400, "one of the two"),
        ({"at": None, "window": False}, 400, "one of the two"),
        ({"at": None, "window": True}, 400, "no maintenance window"),
    ],
)
def test_the_api_refuses_a_bad_schedule_in_json_and_stores_nothing(client, lab, operator, change, status, message):
    from api.tokens import token_create

    token = token_create(user=operator, name="t", actor=operator).secret
    body = {"kind": "switch", "host": "lab", "revision": 2, "at": (timezone.now() + timedelta(hours=2)).isoformat()}
    response = _api(client, token, {**body, **change})
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json") and message in response.json()["detail"]
    assert not ScheduledChange.objects.exists()


def test_the_api_schedules_lists_and_cancels(client, lab, operator):
    from api.tokens import token_create

    token = token_create(user=operator, name="t", actor=operator).secret
    at = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)
    made = _api(client, token, {"kind": "switch", "host": "lab", "revision": 2, "at": at.isoformat()})
    assert made.status_code == 201 and made.json()["change"] == "switch to r2" and made.json()["scheduled_by"] == "otto"
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    listed = client.get("/api/v1/schedules/?host=lab", **auth).json()
    assert [i["id"] for i in listed["items"]] == [made.json()["id"]] and listed["items"][0]["state"] == "pending"
    cancelled = client.post(f"/api/v1/schedules/{made.json()['id']}/cancel/", **auth)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    again = client.post(f"/api/v1/schedules/{made.json()['id']}/cancel/", **auth)
    assert again.status_code == 400 and "already cancelled" in again.json()["detail"]
