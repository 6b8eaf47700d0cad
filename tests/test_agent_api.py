"""A host's credential reaches its own host's business and nothing else.

The agent API (/agent/v1/) is the only door a GPU host has into the panel. These tests hold
two hosts, each with its own token, and check what host A's token can and cannot do: read and
end its own operations, get the launch (and API key) of its own revisions; never another
host's operations, revisions or secrets, never a user, and nothing once it is revoked.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from core.models import AuditEvent
from deployments.choices import OperationKind, OperationState
from deployments.models import BenchmarkRun, Deployment, ModelVariant, Operation, active_revision_id_of
from deployments.services.operations import operation_create, operations_mark_lost
from deployments.services.revisions import revision_create
from deployments.services.secrets import secret_set
from hardware.credentials import host_token_issue
from hardware.models import Host, HostCredential

pytestmark = pytest.mark.django_db
KEY_A, KEY_B = "sk-host-a-0123456789", "sk-host-b-9876543210"


class Agent:
    """A host agent's HTTP view of the panel: every request carries its bearer token."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.client = Client()

    def get(self, path: str) -> Any:
        return self.client.get(f"/agent/v1/{path}", HTTP_AUTHORIZATION=f"Bearer {self.token}")

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.client.post(
            f"/agent/v1/{path}",
            data=json.dumps(body or {}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.token}",
        )


@pytest.fixture
def two_hosts(catalog: None, admin_user: User, operator: User) -> dict[str, Any]:
    world: dict[str, Any] = {}
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    for name, key in (("alpha", KEY_A), ("beta", KEY_B)):
        host, token = host_token_issue(name=name, actor=admin_user)
        secret_set(host=host, name="api-key", value=key, actor=admin_user)
        revision = revision_create(
            host=host,
            engine="vllm",
            model_variant=variant,
            api_key_secret="api-key",
            message=f"{name} with a key",
            actor=operator,
        )
        op = operation_create(kind=OperationKind.SWITCH, host=host, revision=revision, actor=operator)
        world[name] = {"host": host, "agent": Agent(token), "revision": revision, "op": op, "token": token}
    return world


def test_host_token_prints_once_stores_only_a_hash_and_revokes_the_old_one(db: Any) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("host", "token", "gpu-box-1", stdout=out, stderr=err)
    first = out.getvalue().strip()
    assert first.startswith("cph_") and len(first) > 40 and "\n" not in first
    assert "shown only now" in err.getvalue()
    host = Host.objects.get(name="gpu-box-1")  # issuing a token for a new name declares the host
    stored = HostCredential.objects.get(host=host)
    assert first not in (stored.digest, stored.prefix) and stored.prefix == first[:12]
    assert Agent(first).post("heartbeat", {"engine_state": {}}).status_code == 200

    out = io.StringIO()
    call_command("host", "token", "gpu-box-1", stdout=out, stderr=io.StringIO())
    second = out.getvalue().strip()
    assert second != first
    assert Agent(first).post("heartbeat").status_code == 401  # the old one stopped working
    assert Agent(second).post("heartbeat").status_code == 200

    call_command("host", "token", "gpu-box-1", "--revoke", stdout=io.StringIO(), stderr=io.StringIO())
    refused = Agent(second).post("heartbeat")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    actions = list(AuditEvent.objects.filter(host=host).values_list("action", flat=True))
    assert actions.count("host.token.issue") == 2 and "host.token.revoke" in actions
    assert not any(
        first in str(e.data) + e.summary or second in str(e.data) + e.summary for e in AuditEvent.objects.all()
    )


def test_no_token_a_wrong_token_or_a_session_gets_nothing(two_hosts: dict[str, Any], admin_user: User) -> None:
    op = two_hosts["alpha"]["op"]
    anonymous = Client()
    assert anonymous.post(f"/agent/v1/operations/{op.pk}/begin").status_code == 401
    assert Agent("cph_" + "x" * 43).post(f"operations/{op.pk}/begin").status_code == 401
    assert Agent(two_hosts["alpha"]["token"][:-1]).get("operations").status_code == 401
    signed_in = Client()
    signed_in.force_login(admin_user)  # a person's session is not a host credential
    assert signed_in.post(f"/agent/v1/operations/{op.pk}/begin").status_code == 401
    op.refresh_from_db()
    assert op.state == OperationState.QUEUED


def test_a_host_reads_and_runs_its_own_operation_with_its_own_key(two_hosts: dict[str, Any]) -> None:
    alpha = two_hosts["alpha"]
    listed = alpha["agent"].get("operations").json()["operations"]
    assert [o["id"] for o in listed] == [str(alpha["op"].pk)]

    begun = alpha["agent"].post(f"operations/{alpha['op'].pk}/begin", {"worker": "agent@alpha"}).json()
    assert begun["begun"] is True
    order = begun["order"]
    assert order["kind"] == "switch" and order["revision"]["id"] == alpha["revision"].pk
    assert order["revision"]["api_key"] == KEY_A
    assert KEY_B not in json.dumps(begun)
    assert alpha["agent"].post(f"operations/{alpha['op'].pk}/begin").json() == {"begun": False, "state": "running"}

    answer = alpha["agent"].post(f"operations/{alpha['op'].pk}/progress", {"stage": "loading", "progress": 0.5})
    assert answer.json() == {"cancelled": False}
    Operation.objects.filter(pk=alpha["op"].pk).update(cancel_requested=True)
    answer = alpha["agent"].post(f"operations/{alpha['op'].pk}/progress", {"log": "still loading"})
    assert answer.json() == {"cancelled": True}

    done = alpha["agent"].post(f"operations/{alpha['op'].pk}/finish", {"state": "succeeded", "result": {"revision": 1}})
    assert done.json() == {"recorded": True}
    op = Operation.objects.get(pk=alpha["op"].pk)
    assert op.state == OperationState.SUCCEEDED and "still loading" in op.log
    assert active_revision_id_of(Host.objects.get(pk=alpha["host"].pk)) == alpha["revision"].pk
    again = alpha["agent"].post(f"operations/{alpha['op'].pk}/finish", {"state": "failed", "error": "x"})
    assert again.json() == {"recorded": False}
    assert Operation.objects.get(pk=alpha["op"].pk).state == OperationState.SUCCEEDED


def test_another_hosts_operation_revision_and_secret_are_not_there(two_hosts: dict[str, Any]) -> None:
    """A message forged onto alpha's queue naming beta's operation gets alpha nothing."""
    alpha, beta = two_hosts["alpha"], two_hosts["beta"]
    theirs = beta["op"].pk
    for path in (f"operations/{theirs}/begin", f"operations/{theirs}/progress"):
        response = alpha["agent"].post(path, {"stage": "hijacked", "log": "forged"})
        assert response.status_code == 404, path
        assert KEY_B not in response.content.decode()
    finish = alpha["agent"].post(f"operations/{theirs}/finish", {"state": "succeeded"})
    assert finish.status_code == 404
    op = Operation.objects.get(pk=theirs)
    assert op.state == OperationState.QUEUED and op.log == "" and op.stage == ""
    assert active_revision_id_of(Host.objects.get(pk=beta["host"].pk)) is None

    assert alpha["agent"].get(f"revisions/{beta['revision'].pk}/launch").status_code == 404
    own = alpha["agent"].get(f"revisions/{alpha['revision'].pk}/launch").json()
    assert own["api_key"] == KEY_A
    listed = alpha["agent"].get("operations").content.decode()
    assert str(theirs) not in listed

    # Heartbeats and telemetry land on the token's host whatever the body says.
    alpha["agent"].post("heartbeat", {"engine_state": {"running": False, "host": "beta"}, "host": "beta"})
    assert Host.objects.get(pk=beta["host"].pk).last_heartbeat is None


def test_a_host_credential_cannot_create_users_or_use_the_pages(two_hosts: dict[str, Any]) -> None:
    agent = two_hosts["alpha"]["agent"]
    before = User.objects.count()
    for path in ("/people/new/", "/admin/auth/user/add/"):
        response = agent.client.post(
            path,
            {"username": "mallory", "password1": "pw-pw-pw-pw-1", "password2": "pw-pw-pw-pw-1", "role": "admin"},
            HTTP_AUTHORIZATION=f"Bearer {agent.token}",
        )
        assert response.status_code in (302, 403), path
        assert "/accounts/login/" in response.get("Location", "/accounts/login/")
    assert User.objects.count() == before and not User.objects.filter(username="mallory").exists()
    page = agent.client.get("/", HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    assert page.status_code == 302 and "/accounts/login/" in page["Location"]


def test_a_revoked_token_stops_at_once(two_hosts: dict[str, Any], admin_user: User) -> None:
    from hardware.credentials import host_token_revoke

    alpha = two_hosts["alpha"]
    assert alpha["agent"].get("operations").status_code == 200
    host_token_revoke(host=alpha["host"], actor=admin_user)
    for response in (
        alpha["agent"].get("operations"),
        alpha["agent"].post(f"operations/{alpha['op'].pk}/begin"),
        alpha["agent"].get(f"revisions/{alpha['revision'].pk}/launch"),
        alpha["agent"].post("telemetry", {"gpu_samples": []}),
    ):
        assert response.status_code == 401
    assert Operation.objects.get(pk=alpha["op"].pk).state == OperationState.QUEUED


def test_only_an_admin_issues_tokens(db: Any, operator: User) -> None:
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        host_token_issue(name="sneaky", actor=operator)
    assert not Host.objects.filter(name="sneaky").exists()


def test_a_benchmark_reported_after_the_panel_marked_it_lost_is_kept(two_hosts: dict[str, Any], operator: User) -> None:
    """The panel was away longer than the reaper's patience: the agent's late report still counts."""
    beta = two_hosts["beta"]
    agent = beta["agent"]
    agent.post(f"operations/{beta['op'].pk}/finish", {"state": "cancelled"})  # free beta's host lock
    from serving.benchmarking.profiles import BenchmarkProfile  # noqa: F401 - the profile's shape

    Deployment.objects.create(host=beta["host"], active_revision=beta["revision"])
    op = operation_create(
        kind=OperationKind.BENCHMARK,
        host=beta["host"],
        revision=beta["revision"],
        params={"profile": {"name": "quick"}, "revision": 1},
        actor=operator,
    )
    assert agent.post(f"operations/{op.pk}/begin").json()["begun"] is True
    Operation.objects.filter(pk=op.pk).update(heartbeat_at=op.created_at.replace(year=2000))
    assert [o.pk for o in operations_mark_lost(reason="silent")] == [op.pk]

    result = {"status": "completed", "levels": [{"label": "c1", "requests": [{"ttft_ms": 12.0}]}], "energy_j": 3.5}
    done = agent.post(
        f"operations/{op.pk}/finish", {"state": "succeeded", "result": {"status": "completed"}, "benchmark": result}
    )
    assert done.json() == {"recorded": True}
    op.refresh_from_db()
    run = BenchmarkRun.objects.get(operation=op)
    assert op.state == OperationState.SUCCEEDED and op.result["reported_after_lost"] is True
    assert op.result["benchmark_run"] == run.pk and run.status == "completed" and run.energy_j == 3.5
    assert run.raw == [{"level": "c1", "ttft_ms": 12.0}]


def test_oversized_reports_and_install_paths_that_are_no_paths_are_refused(
    two_hosts: dict[str, Any], operator: User
) -> None:
    alpha = two_hosts["alpha"]
    agent = alpha["agent"]
    huge = agent.post("heartbeat", {"engine_state": {"note": "x" * (2 * 1024 * 1024)}})
    assert huge.status_code == 400 and Host.objects.get(pk=alpha["host"].pk).engine_state == {}

    agent.post(f"operations/{alpha['op'].pk}/finish", {"state": "cancelled"})  # free the host lock
    op = operation_create(kind=OperationKind.INSTALL, host=alpha["host"], params={"engine": "vllm"}, actor=operator)
    assert agent.post(f"operations/{op.pk}/begin").json()["begun"] is True
    for bad in ({"path": "venvs/vllm"}, {"path": "/opt/vllm", "binary": "/opt/vllm/bin/vllm\nExecStartPre=/bin/sh"}):
        refused = agent.post(
            f"operations/{op.pk}/finish",
            {"state": "succeeded", "install": {"engine": "vllm", "version": "0.22.0", **bad}},
        )
        assert refused.status_code == 400 and "absolute path" in refused.json()["error"]
    assert Operation.objects.get(pk=op.pk).state == OperationState.RUNNING
    assert Host.objects.get(pk=alpha["host"].pk).engine_installs == {}
    good = {"engine": "vllm", "version": "0.22.0", "path": "/opt/vllm", "binary": "/opt/vllm/bin/vllm"}
    assert agent.post(f"operations/{op.pk}/finish", {"state": "succeeded", "install": good}).json() == {
        "recorded": True
    }
    assert Host.objects.get(pk=alpha["host"].pk).engine_installs["vllm"]["0.22.0"]["binary"] == "/opt/vllm/bin/vllm"


def test_a_host_made_by_issuing_its_token_keeps_its_address_whatever_its_agent_reports(db: Any) -> None:
    """The agent's address is a suggestion (audited, shown to admins): only an admin sets one."""
    host, token = host_token_issue(name="far-box", actor=None)
    assert host.address == "127.0.0.1"
    facts = {"address": "far-box.lan", "cpu_model": "EPYC", "model_dirs": ["/srv/models"]}
    answer = Agent(token).post("register", {"facts": facts, "inventory": {"gpus": []}, "engine_state": {}})
    assert answer.status_code == 200 and answer.json()["host"] == "far-box"
    host.refresh_from_db()
    assert host.address == "127.0.0.1" and host.model_dirs == ["/srv/models"] and host.last_probe_at
    event = AuditEvent.objects.filter(host=host, action="host.probe").latest("created_at")
    assert event.data["reported_address"] == "far-box.lan"


def test_agent_requests_skip_the_browsers_machinery_but_not_its_guards(
    two_hosts: dict[str, Any], admin_user: User, settings: Any
) -> None:
    """deployments.agent_api.middleware: an agent request ends before sessions and the sign-in
    wall, so it never gets a cookie or a sign-in redirect; the Host check, the HTTPS redirect and
    Django's 404 still apply."""
    agent = two_hosts["alpha"]["agent"]
    signed_in = Client()
    signed_in.force_login(admin_user)
    answer = signed_in.get("/agent/v1/hello", HTTP_AUTHORIZATION=f"Bearer {two_hosts['alpha']['token']}")
    assert answer.status_code == 200 and answer.json()["host"] == "alpha"
    assert not answer.cookies and "Cookie" not in answer.get("Vary", "")
    assert agent.get("no-such-endpoint").status_code == 404
    strict = Client(raise_request_exception=False)
    assert strict.get("/agent/v1/hello", HTTP_HOST="evil.example").status_code == 400
    settings.SECURE_SSL_REDIRECT = True  # read when a handler loads its middleware: a new client
    redirected = Client().get("/agent/v1/hello", HTTP_AUTHORIZATION=f"Bearer {two_hosts['alpha']['token']}")
    assert redirected.status_code == 301 and redirected["Location"].startswith("https://")


def test_a_heartbeat_points_the_host_at_what_it_really_serves_once_nothing_is_under_way(
    two_hosts: dict[str, Any], operator: User
) -> None:
    """A switch lost to an agent's restart left its engine running (it was still loading when the
    agent registered again): the first heartbeat after it turned healthy sets the host's pointer,
    but never while an operation is under way there (bench/chaos.py found the pointer left behind)."""
    alpha = two_hosts["alpha"]
    host, agent, switch = alpha["host"], alpha["agent"], alpha["op"]
    started = {"running": True, "healthy": True, "revision_id": str(alpha["revision"].pk)}
    assert agent.post("heartbeat", {"engine_state": started}).status_code == 200
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) is None  # the switch is still queued

    assert agent.post(f"operations/{switch.pk}/begin", {"worker": "agent"}).status_code == 200
    assert agent.post("heartbeat", {"engine_state": started}).status_code == 200
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) is None  # the switch runs: its word decides
    operations_mark_lost(host=host, worker_gone=True, reason="the agent restarted")
    assert Operation.objects.get(pk=switch.pk).state == OperationState.LOST
    loading = {**started, "healthy": False}
    assert agent.post("heartbeat", {"engine_state": loading}).status_code == 200
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) is None  # not serving yet
    assert agent.post("heartbeat", {"engine_state": started}).status_code == 200
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == alpha["revision"].pk
    assert AuditEvent.objects.filter(action="host.activate", summary__contains="alpha now serves").exists()

    other = two_hosts["beta"]["revision"]  # another host's revision is never taken for this host's
    agent.post("heartbeat", {"engine_state": {**started, "revision_id": str(other.pk)}})
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == alpha["revision"].pk
