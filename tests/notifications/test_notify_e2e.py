"""Notifications end to end: events raised where the panel records them (the agent API ending
an operation, reporting a watchdog event, heartbeating; a benchmark's results; beat's presence
check), delivered by the panel's real Celery worker to real local receivers.

The "agent" here is the agent API driven over HTTP with a real host token, sending what
hostagent/operations sends (the same result shapes); the benchmark results are those recorded
on an H200 (tests/fixtures/gpu/h200), two sweeps of one profile."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from core.models import AuditEvent
from deployments.choices import OperationKind
from deployments.models import ModelVariant
from deployments.services.operations import operation_create
from hardware.credentials import host_token_issue
from hardware.models import Host, HostEvent
from notifications.channels import UNREACHABLE
from notifications.choices import DeliveryState, EventKind
from notifications.models import Channel, Delivery
from notifications.services import channel_create, rule_create
from notifications.tasks import check_host_presence
from tests.support.panel_worker import PanelWorker
from tests.support.receivers import SilentReceiver, SmtpServer, WebhookReceiver, wait_for
from tests.support.revisions import make_revision

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]
H200 = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "h200"
PANEL = "https://panel.lab.example"
LOOPBACK = "127.0.0.0/8"


@pytest.fixture(scope="module")
def worker(django_db_setup: Any, tmp_path_factory: Any) -> Any:
    queue = f"notify-test-{uuid.uuid4().hex[:8]}"
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    # The receivers are on loopback: the lab allows it, for the worker and for saving channels.
    env = {"CONTROLPANEL_URL": PANEL, "CONTROLPANEL_NOTIFY_ALLOWED_NETWORKS": LOOPBACK}
    panel_worker = PanelWorker(queue, log, extra_env=env).start()
    yield panel_worker
    panel_worker.stop()


@pytest.fixture(autouse=True)
def _panel(settings: Any, worker: PanelWorker) -> None:
    settings.NOTIFICATIONS_QUEUE = worker.queue
    settings.CONTROLPANEL_URL = PANEL
    settings.NOTIFICATIONS_ALLOWED_NETWORKS = [LOOPBACK]


class Agent:
    """The host's side of the agent API: every request with its bearer token."""

    def __init__(self, token: str) -> None:
        self.token, self.client = token, Client()

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.client.post(
            f"/agent/v1/{path}",
            data=json.dumps(body or {}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.token}",
        )
        assert response.status_code == 200, response.content
        return response.json()


@pytest.fixture
def lab(catalog: None, admin_user: User, operator: User) -> dict[str, Any]:
    host, token = host_token_issue(name="gpu-box-1", actor=admin_user)
    other, _ = host_token_issue(name="gpu-box-2", actor=admin_user)
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    revs = [
        make_revision(host=host, engine="vllm", model_variant=variant, message=f"rev {n}", actor=operator)
        for n in (1, 2)
    ]
    agent = Agent(token)
    agent.post("heartbeat", {"engine_state": {}})
    return {"host": host, "other": other, "revs": revs, "agent": agent, "admin": admin_user, "operator": operator}


def _delivery(channel: Channel, timeout: float = 30) -> Delivery:
    return wait_for(
        lambda: Delivery.objects.filter(channel=channel, state__in=["delivered", "failed"]).first(),
        timeout,
        f"a delivery to {channel.name}",
    )


def _switch(lab: dict[str, Any], *, result: dict[str, Any], error: str) -> tuple[Any, float]:
    """A switch to r2 that the host ends as failed, as hostagent/operations/switch.py reports it;
    returns the operation and how long the finish call took."""
    op = operation_create(
        kind=OperationKind.SWITCH,
        host=lab["host"],
        revision=lab["revs"][1],
        params={"revision": 2, "previous": 1},
        actor=lab["operator"],
    )
    lab["agent"].post(f"operations/{op.pk}/begin", {"worker": "agent@gpu-box-1"})
    started = time.perf_counter()
    answer = lab["agent"].post(f"operations/{op.pk}/finish", {"state": "failed", "result": result, "error": error})
    took = time.perf_counter() - started
    assert answer == {"recorded": True}
    return op, took


ROLLED_BACK = {
    "revision": 2,
    "previous": 1,
    "reason": "the engine exited with code 1 before it was ready",
    "log_tail": ["ValueError: max_model_len 262144 is larger than the model's 131072"],
    "rolled_back": True,
    "rollback_failed": False,
}
ROLLED_BACK_ERROR = (
    "r2 failed (the engine exited with code 1 before it was ready); rolled back to r1, which is serving again."
)


def test_a_switch_that_rolled_back_reaches_a_json_webhook_with_what_where_and_a_link(lab):
    with WebhookReceiver() as hook:
        url = f"json://127.0.0.1:{hook.port}/hooks/panel"
        channel = channel_create(name="ops-webhook", url=url, actor=lab["admin"])
        rule_create(
            channel=channel,
            host=lab["host"],
            events=[EventKind.SWITCH_ROLLED_BACK, EventKind.ROLLBACK_FAILED],
            actor=lab["admin"],
        )
        # Not for this event, not for this host, or disabled: nothing from these.
        quiet = channel_create(name="quiet", url=f"json://127.0.0.1:{hook.port}/quiet", actor=lab["admin"])
        rule_create(channel=quiet, host=None, events=[EventKind.INSTALL_FAILED], actor=lab["admin"])
        rule_create(channel=quiet, host=lab["other"], events=[EventKind.SWITCH_ROLLED_BACK], actor=lab["admin"])
        rule_create(channel=quiet, host=None, events=[EventKind.SWITCH_ROLLED_BACK], enabled=False, actor=lab["admin"])

        op, _ = _switch(lab, result=ROLLED_BACK, error=ROLLED_BACK_ERROR)
        delivery = _delivery(channel)
        assert delivery.state == DeliveryState.DELIVERED, delivery.error
        [got] = wait_for(lambda: hook.received, 10, "the webhook")
    assert got["path"] == "/hooks/panel"
    message = got["json"]
    assert message["title"] == "[gpu-box-1] Switch failed and rolled back (r2)"
    lines = message["message"].splitlines()
    assert lines[0] == "Switch of gpu-box-1 to r2 failed; rolled back to r1."
    assert "Host: gpu-box-1" in lines and "Revision: r2" in lines
    assert f"Error: {ROLLED_BACK_ERROR}" in lines
    assert f"Details: {PANEL}/operations/{op.pk}/" in lines
    assert (delivery.event, delivery.host_name, delivery.link) == (
        EventKind.SWITCH_ROLLED_BACK,
        "gpu-box-1",
        f"{PANEL}/operations/{op.pk}/",
    )
    assert not Delivery.objects.filter(channel=quiet).exists()


def test_a_channel_that_never_answers_does_not_slow_the_operations_end(lab, capsys):
    """The finish call stays fast with a channel whose receiver never answers (5 s read
    timeout); the deliveries are recorded failed (not delivered: no answer), seconds later, by the worker,
    each to be sent again after the first wait of NOTIFICATIONS_RETRY_S."""
    _switch(lab, result=ROLLED_BACK, error=ROLLED_BACK_ERROR)  # warm-up; no rule yet: nothing to send
    no_channel = sorted(_switch(lab, result=ROLLED_BACK, error=ROLLED_BACK_ERROR)[1] for _ in range(3))
    with SilentReceiver() as silent:
        channel = channel_create(
            name="never-answers", url=f"json://127.0.0.1:{silent.port}/hook?rto=5&cto=5", actor=lab["admin"]
        )
        rule_create(channel=channel, host=None, events=[EventKind.SWITCH_ROLLED_BACK], actor=lab["admin"])
        with_silent = sorted(_switch(lab, result=ROLLED_BACK, error=ROLLED_BACK_ERROR)[1] for _ in range(3))

        def three_failed() -> list[Delivery] | None:
            rows = list(Delivery.objects.filter(channel=channel, state="retry"))
            return rows if len(rows) == 3 else None

        done = wait_for(three_failed, 90, "three failed deliveries, to be retried")
    assert max(with_silent) < 2.5, f"finish calls took {with_silent} s"  # well under the channel's 5 s
    assert all(d.error == UNREACHABLE and d.seconds is not None and d.seconds >= 4.9 for d in done), [
        (d.error, d.seconds) for d in done
    ]
    assert all(d.attempts == 1 and d.retry_at is not None and d.retry_at > d.finished_at for d in done)
    with capsys.disabled():
        print(
            f"\nagent API finish of a failed switch (median of 3): {no_channel[1] * 1000:.0f} ms with no channel, "
            f"{with_silent[1] * 1000:.0f} ms with a channel that never answers; its deliveries failed after "
            f"{', '.join(f'{d.seconds:.1f}' for d in done)} s: {done[0].error}"
        )


def _benchmark_payload(export: dict[str, Any]) -> dict[str, Any]:
    """What the agent sends at a benchmark's end: the results, each level with its requests."""
    results = dict(export["results"])
    by_level: dict[str, list[dict[str, Any]]] = {}
    for record in export["raw"]:
        record = dict(record)
        by_level.setdefault(record.pop("level"), []).append(record)
    results["levels"] = [{**lvl, "requests": by_level.get(lvl["label"], [])} for lvl in results["levels"]]
    return results


def _benchmark(lab: dict[str, Any], revision: Any, fixture: str) -> Any:
    export = json.loads((H200 / fixture).read_text())["benchmark"]["export"]
    op = operation_create(
        kind=OperationKind.BENCHMARK,
        host=lab["host"],
        revision=revision,
        params={"profile": export["profile"], "revision": revision.number},
        actor=lab["operator"],
    )
    lab["agent"].post(f"operations/{op.pk}/begin", {"worker": "agent@gpu-box-1"})
    lab["agent"].post(
        f"operations/{op.pk}/finish", {"state": "succeeded", "result": {}, "benchmark": _benchmark_payload(export)}
    )
    return op


def test_a_benchmark_slower_than_the_previous_revisions_is_mailed_by_the_rules_limits(lab):
    """r1 and r2 benchmarked with one profile (two recorded H200 sweeps): at 16 streams decode
    is 8.6 % slower and TTFT p50 15.7 % higher. The rule with limits 5 % / 10 % mails it; the
    one with the default limits (10 % / 20 %) sends nothing."""
    with SmtpServer() as smtp, WebhookReceiver() as hook:
        mail = channel_create(
            name="ops-mail",
            url=f"mailto://127.0.0.1:{smtp.port}?from=panel@lab.example&to=ops@lab.example&mode=insecure",
            actor=lab["admin"],
        )
        rule_create(
            channel=mail,
            host=lab["host"],
            events=[EventKind.BENCHMARK_REGRESSED],
            thresholds={"decode_tok_s": 5, "ttft_p50": 10},
            actor=lab["admin"],
        )
        lenient = channel_create(name="lenient", url=f"json://127.0.0.1:{hook.port}/", actor=lab["admin"])
        rule_create(
            channel=lenient,
            host=None,
            events=[EventKind.BENCHMARK_REGRESSED],
            thresholds={"decode_tok_s": 10, "ttft_p50": 20},
            actor=lab["admin"],
        )
        _benchmark(lab, lab["revs"][0], "flow.json")
        assert not Delivery.objects.exists()  # nothing to compare the first run with
        _benchmark(lab, lab["revs"][1], "flow_partial.json")
        delivery = _delivery(mail)
        assert delivery.state == DeliveryState.DELIVERED, delivery.error
        [sent] = wait_for(lambda: smtp.messages, 10, "the mail")
    text = sent.content.decode()
    assert "Subject: [gpu-box-1] Benchmark regressed against the previous revision (r2)" in text
    body = delivery.body
    # The recorded H200 sweeps ran more streams and longer prompts than today's "sweep": the mail says so.
    assert "Benchmark 'sweep (custom: c=1,2,4,8,16 n=32 in=512)' of gpu-box-1 r2 is slower than r1's." in body
    assert "decode tok/s (median request) at concurrency 16: 193.5 -> 177.0 (-8.6 %, limit -5 %)" in body
    assert "TTFT p50 at concurrency 16: 305.2 ms -> 353.1 ms (+15.7 %, limit +10 %)" in body
    assert f"Details: {PANEL}/benchmarks/compare/" in body
    assert "193.5 -> 177.0" in text.replace("=\r\n", "")  # the mail's body (quoted-printable)
    assert not Delivery.objects.filter(channel=lenient).exists() and not hook.received


def test_watchdog_events_and_a_failed_install_reach_their_channels(lab):
    with WebhookReceiver() as hook:
        channel = channel_create(name="watch", url=f"json://127.0.0.1:{hook.port}/", actor=lab["admin"])
        rule_create(
            channel=channel,
            host=None,
            events=[EventKind.WATCHDOG_GAVE_UP, EventKind.INSTALL_FAILED],
            actor=lab["admin"],
        )
        lab["agent"].post("events", {"kind": "restarted", "message": "restarted the engine (1 of 5 this hour)"})
        lab["agent"].post("events", {"kind": "gave_up", "message": "5 restarts within 3600 s: giving up"})
        op = operation_create(
            kind=OperationKind.INSTALL,
            host=lab["host"],
            params={"engine": "vllm", "version": "0.22.0", "source_dir": None, "cuda": True, "wheelhouse": None},
            actor=lab["operator"],
        )
        lab["agent"].post(f"operations/{op.pk}/begin", {"worker": "agent@gpu-box-1"})
        error = "pip install vllm==0.22.0 failed (exit 1): No matching distribution found for vllm==0.22.0"
        lab["agent"].post(f"operations/{op.pk}/finish", {"state": "failed", "result": {}, "error": error})
        wait_for(lambda: len(hook.received) == 2, 30, "two messages")
    titles = sorted(r["json"]["title"] for r in hook.received)
    assert titles == ["[gpu-box-1] Engine install failed", "[gpu-box-1] Watchdog gave up"]
    bodies = {r["json"]["title"]: r["json"]["message"] for r in hook.received}
    assert "Error: 5 restarts within 3600 s: giving up" in bodies["[gpu-box-1] Watchdog gave up"]
    install = bodies["[gpu-box-1] Engine install failed"]
    assert "Install of vllm 0.22.0 on gpu-box-1 failed." in install and f"Error: {error}" in install
    assert set(Delivery.objects.values_list("event", flat=True)) == {"watchdog.gave_up", "install.failed"}


def test_a_host_going_offline_and_coming_back(lab, settings):
    """Beat's presence check (run by the panel's worker) decides "offline" as every page does
    (Host.is_online, HOST_OFFLINE_AFTER_S); the agent's next heartbeat brings the host back."""
    with WebhookReceiver() as hook:
        channel = channel_create(name="presence", url=f"json://127.0.0.1:{hook.port}/", actor=lab["admin"])
        rule_create(
            channel=channel,
            host=lab["host"],
            events=[EventKind.HOST_OFFLINE, EventKind.HOST_ONLINE],
            actor=lab["admin"],
        )
        check_host_presence.apply_async(queue=settings.NOTIFICATIONS_QUEUE)  # first look: only recorded
        wait_for(lambda: Delivery.objects.exists() or _presence_known(lab["host"]), 20, "the first check")
        silent_since = timezone.now() - timezone.timedelta(seconds=settings.HOST_OFFLINE_AFTER_S + 60)
        Host.objects.filter(pk=lab["host"].pk).update(last_heartbeat=silent_since)  # the agent went quiet
        check_host_presence.apply_async(queue=settings.NOTIFICATIONS_QUEUE)
        wait_for(lambda: len(hook.received) == 1, 30, "the offline message")
        lab["agent"].post("heartbeat", {"engine_state": {}})
        check_host_presence.apply_async(queue=settings.NOTIFICATIONS_QUEUE)
        wait_for(lambda: len(hook.received) == 2, 30, "the back-online message")
    offline, online = (r["json"] for r in hook.received)
    assert offline["title"] == "[gpu-box-1] Host went offline"
    assert "gpu-box-1 is offline: its agent last reported" in offline["message"]
    assert online["title"] == "[gpu-box-1] Host came back"
    assert f"Details: {PANEL}/hosts/gpu-box-1/" in online["message"]
    kinds = HostEvent.objects.filter(host=lab["host"], kind__startswith="host.o").values_list("kind", flat=True)
    assert list(kinds) == ["host.online", "host.offline"]  # the host's events page, newest first


def test_a_table_the_front_door_refused_reaches_a_rule_with_its_reason(lab):
    """The door's report says it refused the panel's table (the reason in the door's own words,
    as tests/deployments/test_serving_set_rules.py has a real door give it): a host event, sent once."""
    reason = "r1 and r2 would both listen on port 8001: one port, one engine"
    with WebhookReceiver() as hook:
        channel = channel_create(name="door", url=f"json://127.0.0.1:{hook.port}/", actor=lab["admin"])
        rule_create(channel=channel, host=lab["host"], events=[EventKind.TABLE_REFUSED], actor=lab["admin"])
        report = {"version": "v7", "bind": "127.0.0.1:4000", "state": [], "usage": [],
                  "refused": {"version": "v8", "reason": reason}}  # fmt: skip
        for _ in range(2):  # the door reports every few seconds: one event, one message
            lab["agent"].client.post(
                "/agent/v1/serving/report", data=json.dumps(report), content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {lab['agent'].token}",
            )  # fmt: skip
        wait_for(lambda: hook.received, 30, "the refused-table message")
        time.sleep(1)
    [message] = [r["json"] for r in hook.received]
    assert message["title"] == "[gpu-box-1] Front door refused its serving table (kept the previous one)"
    assert message["type"] == "warning" and f"Error: {reason}" in message["message"]
    assert f"{PANEL}/hosts/gpu-box-1/events/" in message["message"]
    assert HostEvent.objects.filter(host=lab["host"], kind="door.table_refused").count() == 1


def _presence_known(host: Host) -> bool:
    from notifications.models import HostPresence

    return HostPresence.objects.filter(host=host).exists()


def test_send_test_from_the_page_and_the_url_never_shown(lab):
    """An admin adds a channel and sends a test from the page; the URL's credentials are in no
    page, audit event or delivery, and stored only encrypted."""
    secret = "s3cr3t-token-42"
    client = Client()
    client.force_login(lab["admin"])
    with WebhookReceiver() as hook:
        url = f"json://hook:{secret}@127.0.0.1:{hook.port}/{secret}"
        response = client.post("/notifications/channels/new/", {"name": "ops", "url": url, "enabled": "on"})
        assert response.status_code == 302
        channel = Channel.objects.get(name="ops")
        assert channel.service == "JSON" and secret.encode() not in bytes(channel.url_ciphertext)
        client.post(f"/notifications/channels/{channel.pk}/test/")
        delivery = _delivery(channel)
        assert delivery.state == DeliveryState.DELIVERED, delivery.error
        [got] = hook.received
    assert got["json"]["title"] == "Test from the LLM control panel (ops)"
    assert "sent by ada" in got["json"]["message"]
    pages = [client.get(p).content.decode() for p in ("/notifications/", f"/notifications/channels/{channel.pk}/")]
    assert all("Test from the LLM control panel (ops)" in pages[0] and secret not in page for page in pages)
    audit = AuditEvent.objects.filter(action__startswith="notification.")
    assert {e.action for e in audit} == {"notification.channel.create", "notification.test"}
    assert not any(secret in json.dumps(e.data) + e.summary for e in audit)
    assert secret not in delivery.body + delivery.error + delivery.title
