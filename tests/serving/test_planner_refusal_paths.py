"""A revision the planner cannot read is refused by name everywhere, never sized as `{}`.

Before, `planned_memory` swallowed the planner's error and answered `{}`: the front door was told
the model took no memory and loaded it on top of the others, the pages showed "–", and a pinned set
was judged to fit. Now the switch, the serving set, the confirmation page, the door's document (and
so the door), the host page and the API all name the reason. The revision here is a row an older
panel stored with a knob no adapter knows (revisions are immutable, so it stays as stored)."""

from __future__ import annotations

import asyncio
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from api.tokens import token_create
from deployments.agent_api.orders import operation_order
from deployments.models import DeploymentRevision, ModelVariant
from deployments.services.front_door import front_door_document
from deployments.services.revisions import revision_mark_active
from deployments.services.serving_set import serving_mode_set
from deployments.services.switch import switch_request
from hardware.models import GPU, Host
from hostagent.door.loader import AgentLoader, LoadError
from hostagent.door.tables import serving_set
from hostagent.runtime.supervisor import Supervisor
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db
REASON = "the planner cannot read r2: unknown vllm knob 'tensor_paralel_size'"


@pytest.fixture
def lab(catalog: None, operator: Any) -> dict[str, Any]:
    """Two H100s; r1 (active) and r2 pinned, r3 not served, each taking 45% of GPU 0; r2 as an older
    panel stored it, with a knob misspelt."""
    host = Host.objects.create(name="lab", nvml_available=True, model_dirs=["/srv/models"])
    for i in range(2):
        GPU.objects.create(host=host, index=i, name="NVIDIA H100 80GB HBM3", memory_bytes=80 << 30)
    qwen = ModelVariant.objects.get(name="Qwen3-32B-AWQ")

    def rev(port: int) -> DeploymentRevision:
        return make_revision(
            host=host,
            engine="vllm",
            model_variant=qwen,
            knobs={"gpu_memory_utilization": 0.45},
            port=port,
            message="m",
            actor=operator,
        )

    r1, r2, r3 = rev(8001), rev(8002), rev(8003)
    revision_mark_active(revision=r1, actor=operator)
    serving_mode_set(revision=r2, mode="pinned", actor=operator)
    DeploymentRevision.objects.filter(pk=r2.pk).update(knobs={"gpu_memory_utilization": 0.45, "tensor_paralel_size": 2})
    r2.refresh_from_db()
    return {"host": host, "r1": r1, "r2": r2, "r3": r3}


def test_the_switch_and_the_serving_set_refuse_it_by_name(lab: dict[str, Any], operator: Any) -> None:
    with pytest.raises(ValidationError, match="unknown vllm knob 'tensor_paralel_size'"):
        switch_request(revision=lab["r2"], actor=operator)
    with pytest.raises(ValidationError, match=REASON):  # a pinned set with r2 in it cannot be sized
        serving_mode_set(revision=lab["r3"], mode="pinned", actor=operator)


def test_the_door_is_told_why_and_refuses_to_load_it(lab: dict[str, Any], tmp_path: Path) -> None:
    document = front_door_document(lab["host"])
    models = {m.launch.number: m for m in document.models}
    assert set(models[1].launch.memory.devices) == {"gpu0"} and models[1].launch.memory.refused == ""
    r2 = models[2].launch
    assert r2.memory.devices == {} and r2.memory.refused == REASON
    # What the host's agent does with it: in its table, and a load of it answers the reason.
    made = serving_set(document.to_dict(), bind_host="127.0.0.1")
    loader = AgentLoader(Supervisor(tmp_path / "host"), tmp_path / "ondemand", gpus=True)
    loader.update(made.served)
    with pytest.raises(LoadError, match=REASON):
        asyncio.run(loader.load(models[2].name))


def test_the_pages_and_the_api_say_why(lab: dict[str, Any], operator: Any, client: Client) -> None:
    client.force_login(operator)
    part = client.get("/hosts/lab/front-door/")
    assert part.status_code == 200 and REASON in unescape(part.content.decode())
    page = client.get("/hosts/lab/revisions/2/switch/")
    assert page.status_code == 200 and f"{REASON}, so its memory on the GPUs is unknown." in unescape(
        page.content.decode()
    )
    token = token_create(user=operator, name="t", actor=operator).secret
    listed = client.get("/api/v1/hosts/lab/serving/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert listed.status_code == 200
    items = {item["revision"]: item for item in listed.json()["items"]}
    assert items[2]["memory_planned"] == {} and items[2]["planner_refused"] == REASON
    assert items[1]["memory_planned"] and items[1]["planner_refused"] == ""


def test_a_rollback_to_it_is_still_ordered(lab: dict[str, Any], operator: Any, admin_user: Any) -> None:
    """A revision that once ran is not blocked by the planner on the way back: its order carries no
    planned bytes (the host skips that check) rather than failing to build."""
    from deployments.services.operations import operation_create

    revision_mark_active(revision=lab["r2"], actor=admin_user)
    host = Host.objects.get(name="lab")
    op = operation_create(kind="switch", host=host, revision=lab["r1"], actor=admin_user)
    order = operation_order(op)
    previous = order["previous"]
    assert previous["number"] == 2 and previous["memory"]["devices"] == {}
    assert previous["memory"]["refused"] == REASON  # said: the host skips the memory check
    assert "tensor_paralel_size" in previous["error"]  # the engine's own refusal, which the host says
    assert order["revision"]["memory"]["devices"]
