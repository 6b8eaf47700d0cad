"""The one projection of what a host serves (deployments.host_serving): every serving set the
panel can make, by any path, is one the host's agent accepts; the planner runs once per served
model for a poll, and not at all for a poll answered 304."""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

import deployments.planning as planning_module
from deployments.host_serving import host_serving
from deployments.models import DeploymentRevision, ModelVariant, Operation, active_revision_of
from deployments.services.aliases import alias_set
from deployments.services.demo import demo_load
from deployments.services.revisions import revision_derive, revision_mark_active
from deployments.services.serving_set import serving_mode_set
from deployments.services.switch import switch_request
from hardware.credentials import host_token_issue
from hardware.models import Host
from hostagent.door.tables import serving_set as agent_table
from serving.planner import PlanInputError
from serving.wire import DoorDocument
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db
GiB = 1 << 30


def accepted(host: Host) -> DoorDocument:
    """The host's document, through JSON as the agent gets it, made into the agent's table
    (hostagent.door.tables raises TableError for one it refuses)."""
    document = host_serving(host).document()
    sent = json.loads(json.dumps(document.to_dict()))
    made = agent_table(sent, bind_host="127.0.0.1")
    assert made.version == document.version and len(made.table.models) == len(document.models)
    return document


def each_change(host: Host, actor: User) -> Iterator[str]:
    """Every change a path can make to `host`'s set, tried on each revision: serve it pinned or on
    demand, derive a revision from it ("New revision from this") and switch to that, switch to it.
    Refused changes change nothing; each one yields what it did."""
    for revision in list(host.revisions.order_by("number")):
        for mode in ("on-demand", "pinned"):
            try:
                serving_mode_set(revision=revision, mode=mode, actor=actor)
                yield f"r{revision.number} {mode}"
            except ValidationError:
                pass
        child = revision_derive(host=host, parent=revision, changes={}, message="New revision from this", actor=actor)
        yield f"r{child.number} from r{revision.number}"
        for target in (child, revision):
            try:
                switch_request(revision=target, actor=actor)
            except ValidationError:
                continue
            revision_mark_active(revision=target, actor=actor, reason="the host ran the switch")
            yield f"switch to r{target.number}"


def test_every_serving_set_the_panel_makes_is_one_the_agent_accepts(
    catalog: None, operator: User, admin_user: User
) -> None:
    """The demo labs (the seed labs' imports), a CPU host serving each catalog GGUF, and every change
    the paths make to them (a page, the API, the CLI, a rollout and a schedule all end in
    serving_mode_set, revision_derive or switch_request)."""
    demo_load()
    cpu, _ = host_token_issue(name="cpu-lab", actor=admin_user)
    cpu.ram_bytes, cpu.model_dirs = 64 * GiB, ["/models"]
    cpu.save()
    ggufs = ModelVariant.objects.filter(format="gguf").order_by("name")[:4]
    assert ggufs, "the catalog has GGUF models"
    for port, variant in enumerate(ggufs, start=8001):
        revision = make_revision(
            host=cpu, engine="llama.cpp", model_variant=variant, port=port, message=variant.name, actor=operator,
            knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0},
        )  # fmt: skip
        if active_revision_of(cpu) is None:
            revision_mark_active(revision=revision, actor=operator)
            alias_set(host=cpu, name="chat", revision=revision, actor=operator)
    hosts = list(Host.objects.filter(name__in=["demo-6x3090", "demo-2x5060ti", "cpu-lab"]))
    assert len(hosts) == 3
    for host in hosts:
        first = accepted(host)
        assert first.models and first.models[0].mode == "pinned"
        done = []
        for change in each_change(host, operator):
            done.append(change)
            accepted(host)
        assert any(c.startswith("switch to") for c in done) and any(" from " in c for c in done), done


def test_an_alias_that_became_a_served_name_leaves_the_document_not_the_whole_table(
    cpu_lab: dict[str, Any], operator: User
) -> None:
    """An alias `tiny-r4` made while there was no r4, then r4 made active by a path that asks no rule
    of the set (an agent's restore, the demo): the name wins, the table is still accepted."""
    host, r2 = cpu_lab["host"], cpu_lab["revisions"][1]
    alias_set(host=host, name="tiny-r4", revision=r2, actor=operator)
    r4 = make_revision(
        host=host, engine="llama.cpp", model_variant=r2.model_variant, served_name="tiny", port=8004,
        knobs={"ctx_size": 1024, "parallel": 1, "n_gpu_layers": 0}, message="r4", actor=operator,
    )  # fmt: skip
    revision_mark_active(revision=r4, actor=operator)
    document = accepted(host)
    assert [m.name for m in document.models][0] == "tiny-r4"
    assert all("tiny-r4" not in m.aliases for m in document.models)


class Counted:
    """Counts the planner's runs (serving.planner.plan) where the panel calls it: its one entry
    point (revision_plan) and a form's preview (plan_for_values), both in deployments.planning."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = planning_module.plan

        def counting(request: Any) -> Any:
            self.calls += 1
            return real(request)

        monkeypatch.setattr(planning_module, "plan", counting)


@pytest.fixture
def cpu_lab(operator: User, admin_user: User) -> dict[str, Any]:
    host, token = host_token_issue(name="alpha", actor=admin_user)
    host.ram_bytes, host.model_dirs = 16 * GiB, ["/models"]
    host.save()
    variant = ModelVariant.objects.create(
        name="tiny-gguf", format="gguf", gguf_file="/models/tiny.gguf", weights_bytes=2 * GiB,
        arch={"architecture": "gemma3", "num_layers": 18},
    )  # fmt: skip
    revisions = [
        make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=variant,
            served_name="tiny",
            port=port,
            message=str(port),
            knobs={"ctx_size": 2048 * (port - 8000), "parallel": 1, "n_gpu_layers": 0},
            actor=operator,
        )  # fmt: skip
        for port in (8001, 8002, 8003)
    ]
    revision_mark_active(revision=revisions[0], actor=operator)
    serving_mode_set(revision=revisions[1], mode="on-demand", actor=operator)
    serving_mode_set(revision=revisions[2], mode="pinned", actor=operator)
    return {"host": host, "token": token, "revisions": revisions}


def test_a_poll_plans_each_served_model_once_and_a_304_plans_nothing(
    cpu_lab: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    planning_module._plans.clear()  # a fresh panel process: nothing planned yet
    counted = Counted(monkeypatch)
    agent = Client(HTTP_AUTHORIZATION=f"Bearer {cpu_lab['token']}")
    first = agent.get("/agent/v1/serving")
    assert first.status_code == 200 and len(first.json()["models"]) == 3
    assert counted.calls == 3  # one per served model, the set's fit rule and the launch's memory included
    counted.calls = 0
    again = agent.get("/agent/v1/serving", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and counted.calls == 0
    # A change to one revision's plan inputs plans that one again, and only it.
    DeploymentRevision.objects.filter(pk=cpu_lab["revisions"][1].pk).update(knobs={"ctx_size": 1024, "parallel": 1})
    changed = agent.get("/agent/v1/serving", HTTP_IF_NONE_MATCH=first["ETag"])
    assert changed.status_code == 200 and counted.calls == 1


def test_the_order_is_the_typed_order_and_carries_each_launch_once(cpu_lab: dict[str, Any], operator: User) -> None:
    """operation_order answers exactly serving.wire.Order.to_dict(): its launches hold the spec, the
    planned memory and the resolved key, with none of the old duplicated fields."""
    from deployments.agent_api.orders import operation_order
    from serving.wire import Order

    host, r2 = cpu_lab["host"], cpu_lab["revisions"][1]
    serving_mode_set(revision=r2, mode="off", actor=operator)
    op = switch_request(revision=r2, actor=operator)
    assert isinstance(op, Operation)
    sent = json.loads(json.dumps(operation_order(op)))
    order = Order.from_dict(sent)
    assert order.to_dict() == sent
    assert order.revision is not None and order.previous is not None
    assert (order.revision.number, order.previous.number, order.host.name) == (2, 1, host.name)
    assert order.revision.memory.devices == {"ram": 2 * GiB} and order.revision.served_name == "tiny"
    old = {"config", "model", "label", "engine", "installs", "memory_need", "memory_planned"}
    assert not old & set(sent["revision"])


def test_a_kept_refusal_is_raised_afresh_each_time(cpu_lab: dict[str, Any]) -> None:
    """A revision the planner refuses is kept refused by its input, and each page or switch that
    asks raises the refusal anew: the kept one raised again grew its traceback by every raise,
    holding each caller's frames (a page polled every few seconds) for the process's life."""
    planning_module._plans.clear()
    revision = cpu_lab["revisions"][1]
    DeploymentRevision.objects.filter(pk=revision.pk).update(knobs={"ctx_size": "lots", "parallel": 1})
    revision.refresh_from_db()
    depths = []
    for _ in range(3):
        with pytest.raises(PlanInputError) as caught:
            planning_module.revision_plan(revision).checked()
        assert caught.value.field == "ctx_size"
        depths.append(len(traceback.extract_tb(caught.value.__traceback__)))
    assert depths[0] == depths[1] == depths[2]
