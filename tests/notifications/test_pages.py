"""The notifications page: what an admin can set, what is refused and why, and that a
channel's URL never comes back (page, audit log, edit form)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from core.models import AuditEvent
from notifications.choices import DeliveryState
from notifications.events import operation_event
from notifications.models import Channel, Delivery, Rule
from notifications.secrets import url_decrypt
from tests.hardware.factories import HostFactory

pytestmark = pytest.mark.django_db
SECRET = "xoxb-77-secret-token"
URL = f"jsons://bot:{SECRET}@hooks.lab.example/panel/{SECRET}"


@pytest.fixture
def admin_client(admin_user):
    client = Client()
    client.force_login(admin_user)
    return client


def _channel(admin_client, **fields):
    return admin_client.post("/notifications/channels/new/", {"name": "ops", "url": URL, "enabled": "on", **fields})


def test_a_channel_is_stored_encrypted_and_its_url_never_shown_again(admin_client):
    assert _channel(admin_client).status_code == 302
    channel = Channel.objects.get(name="ops")
    assert (channel.scheme, channel.service) == ("jsons", "JSON")
    assert url_decrypt(channel.url_ciphertext) == URL and SECRET.encode() not in bytes(channel.url_ciphertext)
    for page in ("/notifications/", f"/notifications/channels/{channel.pk}/"):
        body = admin_client.get(page).content.decode()
        assert "jsons://•••" in body and SECRET not in body and "hooks.lab.example" not in body
    # Saving the edit form with the URL left blank keeps it; a new one replaces it.
    admin_client.post(f"/notifications/channels/{channel.pk}/", {"name": "ops-2", "url": "", "enabled": ""})
    channel.refresh_from_db()
    assert (channel.name, channel.enabled, url_decrypt(channel.url_ciphertext)) == ("ops-2", False, URL)
    admin_client.post(f"/notifications/channels/{channel.pk}/", {"name": "ops-2", "url": "ntfys://ntfy.sh/lab"})
    channel.refresh_from_db()
    assert (channel.service, url_decrypt(channel.url_ciphertext)) == ("ntfy", "ntfys://ntfy.sh/lab")
    events = AuditEvent.objects.filter(action__startswith="notification.channel").order_by("created_at")
    assert [e.data.get("changed") for e in events] == [None, ["name", "enabled"], ["url"]]
    assert not any(SECRET in json.dumps(e.data) + e.summary for e in AuditEvent.objects.all())


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("windows://", "The panel sends to these kinds of URL only"),
        ("discord://4174216298/", "Apprise cannot use this discord:// URL"),
        ("", "This field is required."),
    ],
)
def test_a_url_the_panel_cannot_use_is_refused_with_the_reason_and_nothing_stored(admin_client, url, said):
    response = _channel(admin_client, url=url)
    assert response.status_code == 400
    assert said in response.content.decode()
    assert not Channel.objects.exists() and not AuditEvent.objects.filter(action__startswith="notification").exists()


def test_two_channels_cannot_share_a_name(admin_client):
    _channel(admin_client)
    response = _channel(admin_client)
    assert response.status_code == 400 and "already a channel named ops" in response.content.decode()


def test_rules_per_host_or_global_with_benchmark_limits(admin_client):
    _channel(admin_client)
    channel = Channel.objects.get()
    host = HostFactory(name="gpu-box-1")
    form = {"channel": str(channel.pk), "host": "gpu-box-1", "events": ["switch.rolled_back", "host.offline"]}
    assert admin_client.post("/notifications/rules/new/", {**form, "enabled": "on"}).status_code == 302
    rule = Rule.objects.get()
    assert (rule.host, rule.events, rule.thresholds, rule.enabled) == (
        host,
        ["switch.rolled_back", "host.offline"],
        {},
        True,
    )
    # A benchmark rule needs a limit; a limit is a percentage in (0, 1000].
    bench = {"channel": str(channel.pk), "host": "", "events": ["benchmark.regressed"]}
    refused = admin_client.post("/notifications/rules/new/", bench)
    assert refused.status_code == 400 and "needs a limit for at least one metric" in refused.content.decode()
    refused = admin_client.post("/notifications/rules/new/", {**bench, "threshold_ttft_p50": "-5"})
    assert refused.status_code == 400 and Rule.objects.count() == 1
    ok = admin_client.post("/notifications/rules/new/", {**bench, "threshold_ttft_p50": "25", "enabled": "on"})
    assert ok.status_code == 302
    global_rule = Rule.objects.get(host=None)
    assert global_rule.thresholds == {"ttft_p50": 25.0}
    edit = admin_client.get(f"/notifications/rules/{global_rule.pk}/").content.decode()
    assert 'name="threshold_ttft_p50" value="25.0"' in edit
    page = admin_client.get("/notifications/").content.decode()
    assert "every host" in page and "TTFT p50 +25 %" in page
    assert AuditEvent.objects.filter(action="notification.rule.create").count() == 2


def test_send_test_records_a_delivery_and_queues_it_after_the_commit(admin_client, django_capture_on_commit_callbacks):
    _channel(admin_client)
    channel = Channel.objects.get()
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin_client.post(f"/notifications/channels/{channel.pk}/test/")
    assert response.status_code == 302 and len(callbacks) == 1  # sent by the worker, not in the request
    delivery = Delivery.objects.get()
    assert (delivery.event, delivery.state, delivery.channel_name) == ("test", DeliveryState.PENDING, "ops")
    page = admin_client.get("/notifications/").content.decode()
    assert 'hx-trigger="every 2s"' in page  # polls while a delivery is pending
    Delivery.objects.update(state=DeliveryState.FAILED, error="<b>refused</b>")
    fragment = admin_client.get("/notifications/deliveries/").content.decode()
    assert "every 2s" not in fragment and "&lt;b&gt;refused&lt;/b&gt;" in fragment


def test_an_operation_in_a_shape_nobody_expected_costs_the_notification_not_the_operation(caplog):
    class Odd:
        state = "failed"
        result = ["not", "a", "dict"]
        params = None
        host = None  # no host: building the event fails

    assert operation_event(Odd()) is None
    assert "could not be built" in caplog.text


class _Host:
    pk, name = 7, "gpu-box-1"


class _Op:
    """An operation as the agent API leaves it at its end (the fields operation_event reads)."""

    def __init__(self, kind: str, state: str, result: dict, params: dict, error: str = "boom\nsecond line") -> None:
        self.pk, self.host = "00000000-0000-0000-0000-00000000000f", _Host()
        self.kind, self.state, self.result, self.params, self.error = kind, state, result, params, error


@pytest.mark.parametrize(
    ("op", "kind", "summary"),
    [
        (
            _Op("switch", "failed", {"refused": True, "rolled_back": False}, {"revision": 3, "previous": 2}),
            "switch.refused",
            "Switch refused: r2 still serving (gpu-box-1 refused r3 before anything was stopped).",
        ),
        (
            _Op("switch", "failed", {"rolled_back": False}, {"revision": 3}),
            "switch.failed",
            "Switch of gpu-box-1 to r3 failed.",
        ),
        (
            _Op("switch", "failed", {"rolled_back": True}, {"revision": 3, "previous": 2}),
            "switch.rolled_back",
            "Switch of gpu-box-1 to r3 failed; rolled back to r2.",
        ),
        (
            _Op("switch", "failed", {"rolled_back": False, "rollback_failed": True, "previous": 2}, {"revision": 3}),
            "switch.rollback_failed",
            "Switch of gpu-box-1 to r3 failed and the rollback to r2 failed too: the host serves nothing.",
        ),
        (
            _Op("install", "lost", {}, {"engine": "vllm", "version": "0.22.0"}),
            "install.failed",
            "Install of vllm 0.22.0 on gpu-box-1 failed (lost: the host's worker stopped in the middle of it).",
        ),
        (
            _Op("download", "failed", {}, {"repo_id": "unsloth/Qwen3-8B-GGUF"}),
            "download.failed",
            "Download of unsloth/Qwen3-8B-GGUF to gpu-box-1 failed.",
        ),
    ],
)
def test_what_each_end_of_an_operation_raises(op, kind, summary):
    event = operation_event(op)
    assert event is not None
    assert (event.kind, event.summary, event.error) == (kind, summary, "boom")
    assert event.link_path == f"/operations/{op.pk}/"


@pytest.mark.parametrize(
    "op",
    [
        _Op("switch", "succeeded", {}, {"revision": 3}),
        _Op("switch", "cancelled", {}, {"revision": 3}),
        _Op("benchmark", "failed", {}, {}),
        _Op("probe", "failed", {}, {}),
    ],
)
def test_other_ends_raise_nothing(op):
    assert operation_event(op) is None


@pytest.mark.parametrize(
    ("events", "thresholds", "field"),
    [
        ([], {}, "events"),
        (["switch.failed", "no.such.event"], {}, "events"),
        (["test"], {}, "events"),  # a test message is sent from the page, never by a rule
        (["benchmark.regressed"], {"ttft_p50": "fast"}, "threshold_ttft_p50"),
        (["benchmark.regressed"], {"ttft_p50": float("inf")}, "threshold_ttft_p50"),
        (["benchmark.regressed"], {"decode_tok_s": float("nan")}, "threshold_decode_tok_s"),
        (["benchmark.regressed"], {"no_such_metric": 5}, "thresholds"),
    ],
)
def test_a_rule_the_service_refuses_says_which_field_and_stores_nothing(admin_user, events, thresholds, field):
    from django.core.exceptions import ValidationError

    from notifications.services import channel_create, rule_create

    channel = channel_create(name="ops", url="jsons://hooks.lab.example/panel", actor=admin_user)
    with pytest.raises(ValidationError) as refused:
        rule_create(channel=channel, host=None, events=events, thresholds=thresholds, actor=admin_user)
    assert field in refused.value.message_dict
    assert not Rule.objects.exists()


def test_deliveries_are_sent_by_the_name_the_task_is_registered_under():
    from notifications.services import DELIVER_TASK
    from notifications.tasks import deliver_notification

    assert deliver_notification.name == DELIVER_TASK
