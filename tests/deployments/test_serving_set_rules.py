"""The rules of a host's serving set (one port per engine, names unique and none an alias, the
pinned set fits) as a new user hits them: "New revision from this" of a revision that once was
on demand, then a switch to it (by hand and through a rollout), used to put two revisions on one
port into the set; the agent refused every new table and kept the old one, silently, and clients
of the alias got 503. Here the child gets a free port, the door ends up serving it by the alias,
a switch that would break a rule is refused up front, and a table the agent refuses is shown on
the host page with its reason."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from api.tokens import token_create
from core.models import AuditEvent
from deployments.host_serving import served_set, set_rule_breaks
from deployments.models import ModelAlias, ModelVariant, Operation, ServedRevision
from deployments.services.aliases import alias_set
from deployments.services.revisions import revision_derive, revision_mark_active
from deployments.services.serving_set import serving_mode_set
from deployments.services.switch import switch_request
from hardware.credentials import host_token_issue
from hardware.services import host_tags_set
from hostagent.context import AgentContext
from hostagent.door.service import FrontDoorService
from hostagent.door.tables import serving_set as agent_table
from hostagent.frontdoor import FrontDoorSettings
from hostagent.runtime.supervisor import Supervisor
from rollouts.services import rollout_start
from serving.agent_reports import DoorReport
from tests.support.revisions import make_revision
from tests.test_agent_api import Agent as AgentClient

pytestmark = pytest.mark.django_db
GiB = 1 << 30


class Agent(AgentClient):
    """The host's agent as the panel sees it (tests/test_agent_api.py), and what it tells the panel."""

    def serving(self) -> dict[str, Any]:
        return self.get("serving").json()

    def switched(self, op: Operation) -> None:
        """The host ran the switch and says so, as its agent does."""
        assert self.post(f"operations/{op.pk}/begin", {"worker": "agent@alpha"}).status_code == 200
        assert self.post(f"operations/{op.pk}/finish", {"state": "succeeded", "result": {}}).status_code == 200


@pytest.fixture
def lab(db: Any, admin_user: User, operator: User) -> dict[str, Any]:
    """alpha (CPU, 8 GiB): r1 on 8001 active with the alias `coder`; r2 on 8002, which was on
    demand and then became active by a switch (its row stays: the bug's parent)."""
    host, token = host_token_issue(name="alpha", actor=admin_user)
    host.ram_bytes, host.model_dirs = 8 * GiB, ["/models"]
    host.save()
    small = ModelVariant.objects.create(
        name="tiny-gguf",
        format="gguf",
        gguf_file="/models/tiny.gguf",
        weights_bytes=2 * GiB,
        arch={"architecture": "gemma3", "num_layers": 18},
    )

    def rev(port: int, **fields: Any) -> Any:
        return make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=small,
            served_name="tiny",
            port=port,
            knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0},
            message=f"on {port}",
            actor=operator,
            **fields,
        )

    r1 = rev(8001)
    revision_mark_active(revision=r1, actor=operator)
    alias_set(host=host, name="coder", revision=r1, actor=operator)
    r2 = rev(8002)
    serving_mode_set(revision=r2, mode="on-demand", actor=operator)
    return {"host": host, "agent": Agent(token), "r1": r1, "r2": r2, "rev": rev}


def _one_per_port_and_accepted(document: dict[str, Any]) -> None:
    ports = [m["launch"]["spec"]["port"] for m in document["models"]]
    assert len(ports) == len(set(ports)), ports
    agent_table(document, bind_host="127.0.0.1")  # the agent's own rules: no TableError


def test_a_new_generation_of_the_active_revision_keeps_its_port(lab, operator):
    """The active revision alone does not hold its port: a switch to its child replaces it, so the
    child keeps the port its clients and exports know, and the switch leaves one engine per port."""
    host, agent = lab["host"], lab["agent"]
    child = revision_derive(host=host, parent=lab["r1"], changes={}, message="New revision from this", actor=operator)
    assert child.port == 8001
    agent.switched(switch_request(revision=child, actor=operator))
    _one_per_port_and_accepted(agent.serving())


def test_new_revision_from_a_once_on_demand_revision_then_a_switch_serves_it_by_its_alias(lab, operator, client):
    host, agent = lab["host"], lab["agent"]
    agent.switched(switch_request(revision=lab["r2"], actor=operator))  # r2 active, its on-demand row kept
    assert ModelAlias.objects.get(name="coder").revision == lab["r2"]
    client.force_login(operator)
    page = client.get("/hosts/alpha/revisions/new/?from=2").content.decode()
    assert 'name="port" value="8001"' in page  # the form offers a free port, not r2's 8002
    child = revision_derive(host=host, parent=lab["r2"], changes={}, message="New revision from this", actor=operator)
    assert child.port not in (8002,) and child.port == 8001  # r1 left the set with the switch: 8001 is free
    agent.switched(switch_request(revision=child, actor=operator))
    document = agent.serving()
    _one_per_port_and_accepted(document)
    first = document["models"][0]
    assert (first["launch"]["number"], first["mode"], first["aliases"]) == (child.number, "pinned", ["coder"])
    door = agent_table(document, bind_host="127.0.0.1").table  # what the host's door serves
    assert door.resolve("coder").revision == f"r{child.number}" and door.resolve("coder").upstream.endswith(":8001")
    assert [(m["launch"]["number"], m["mode"]) for m in document["models"][1:]] == [(2, "on-demand")]


def test_a_rollout_from_a_once_on_demand_revision_switches_without_two_engines_on_one_port(lab, operator):
    host, agent = lab["host"], lab["agent"]
    agent.switched(switch_request(revision=lab["r2"], actor=operator))
    host_tags_set(host=host, tags=["lab"], actor=operator)
    change = {"set": {"ctx_size": 4096}, "message": "longer context"}
    rollout = rollout_start(group="lab", kind="revision", change=change, batch_size=1, actor=operator)
    part = rollout.hosts.get()
    child = part.target
    assert child.parent == lab["r2"] and child.port != 8002
    agent.switched(part.operation)
    document = agent.serving()
    _one_per_port_and_accepted(document)
    assert document["models"][0]["launch"]["number"] == child.number and document["models"][0]["aliases"] == ["coder"]


def test_a_switch_that_would_break_a_rule_of_the_set_is_refused_up_front_and_changes_nothing(lab, operator):
    host, agent = lab["host"], lab["agent"]
    serving_mode_set(revision=lab["rev"](8003), mode="pinned", actor=operator)
    same_port = lab["rev"](8002)  # made on r2's port by hand
    too_big = make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=ModelVariant.objects.create(
            name="big-gguf", format="gguf", gguf_file="/models/big.gguf", weights_bytes=7 * GiB,
            arch={"architecture": "gemma3", "num_layers": 18},
        ),
        port=8009,
        knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0},
        message="7 GiB beside 2 GiB pinned",
        actor=operator,
    )  # fmt: skip
    before = (Operation.objects.count(), ServedRevision.objects.count(), agent.serving())
    for revision, why in (
        (same_port, r"r2 and r\d+ would both listen on port 8002|r\d+ and r2 would both listen on port 8002"),
        (too_big, "the pinned revisions do not fit"),
    ):
        with pytest.raises(ValidationError, match=why) as refused:
            switch_request(revision=revision, actor=operator)
        assert "would give its front door a serving set it refuses" in str(refused.value)
    assert (Operation.objects.count(), ServedRevision.objects.count(), agent.serving()) == before
    # Through the API: the same refusal, with its reason.
    token = token_create(user=operator, name="ci", actor=operator).secret
    response = Client().post(
        "/api/v1/hosts/alpha/switch/",
        data=json.dumps({"revision": same_port.number}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 400 and "would both listen on port 8002" in response.content.decode()
    assert Operation.objects.count() == before[0]


def test_a_set_broken_before_the_rules_leaves_the_clash_out_of_the_table_and_says_why(lab, operator, client):
    clash = lab["rev"](8001)  # on the active r1's port, put in the set by an older panel
    ServedRevision.objects.create(host=lab["host"], revision=clash, mode="on-demand")
    document = lab["agent"].serving()
    _one_per_port_and_accepted(document)
    assert [m["launch"]["number"] for m in document["models"]] == [1, 2]  # the active revision keeps its port
    client.force_login(operator)
    part = client.get("/hosts/alpha/front-door/").content.decode()
    said = f"r1 and r{clash.number} would both listen on port 8001"
    assert f"left out of the front door's table: {said}: take it out of the set" in part
    # One rule, said once: what the door leaves out is what a change to this set is refused for.
    assert set_rule_breaks(lab["host"], served_set(lab["host"])) == [said]


def test_a_table_the_agent_refuses_is_shown_on_the_host_page_with_its_reason(lab, operator, client, tmp_path: Path):
    """A real agent front door fed a table with two revisions on one port (as a panel before the
    rules sent it): it keeps its table and its next report says why; the panel shows that."""
    good = lab["agent"].serving()
    broken = json.loads(json.dumps(good))
    broken["version"] = "broken-1"
    broken["models"][1]["launch"]["spec"]["port"] = good["models"][0]["launch"]["spec"]["port"]

    class Panel:  # the agent's side of the wire: what the panel answers, what the agent sends
        def __init__(self) -> None:
            self.answer: dict[str, Any] | None = broken
            self.reports: list[dict[str, Any]] = []

        def serving(self, version: str | None) -> dict[str, Any] | None:
            answer = self.answer
            return None if answer is None or answer.get("version") == version else answer

        def serving_report(self, report: DoorReport) -> None:
            self.reports.append(json.loads(json.dumps(report.to_dict())))

    panel = Panel()
    ctx = AgentContext(host="alpha", panel=panel, supervisor=Supervisor(tmp_path / "host"))  # type: ignore[arg-type]
    settings = FrontDoorSettings(host="127.0.0.1", port=0, queue_wait_s=5, drain_timeout_s=5)
    service = FrontDoorService(ctx, settings, gpus=False, state=tmp_path, interval=0.1, ready_timeout=5)
    service.start()
    try:
        report = _report_where(panel, lambda body: body.get("refused"))
        assert report["version"] is None and "both listen on port 8001" in report["refused"]["reason"]
        assert report["refused"]["version"] == "broken-1"
        assert lab["agent"].post("serving/report", report).status_code == 204
        lab["agent"].post("serving/report", report)  # reported again: one audit record
        client.force_login(operator)
        part = client.get("/hosts/alpha/front-door/").content.decode()
        assert "The front door refused the panel's serving table" in part
        assert "both listen on port 8001" in part.split('class="door-refused-reason">')[1].split("</span>")[0]
        assert AuditEvent.objects.filter(action="door.table_refused").count() == 1
        panel.answer = good  # the panel's table is fine again: served, and the page says nothing more
        fixed = _report_where(panel, lambda body: body.get("version") == good["version"])
        assert fixed["refused"] is None
        assert lab["agent"].post("serving/report", fixed).status_code == 204
        assert "refused" not in client.get("/hosts/alpha/front-door/").content.decode()
    finally:
        service.close(timeout=10)


def _report_where(panel: Any, wanted: Any, timeout: float = 10.0) -> dict[str, Any]:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        found = [body for body in list(panel.reports) if wanted(body)]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"no such report in {timeout} s: {panel.reports[-1:]}")


def test_a_bad_refusal_in_a_report_is_400_and_stores_nothing(lab):
    for bad in ({"reason": 5}, "text", {"version": "v", "reason": "x" * 501}, {"version": "v"}):
        response = lab["agent"].post("serving/report", {"version": "v", "state": [], "usage": [], "refused": bad})
        assert response.status_code == 400
    assert not AuditEvent.objects.filter(action="door.table_refused").exists()
