"""The dashboard's card fingerprints, computed by the database in one query
(dashboard.selectors): the cards built for the hosts that changed carry the same
versions, the fingerprint moves with every field it covers and with nothing else a card does not
show, so a cached card is never stale and an unchanged one is never sent again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, models
from django.template.loader import render_to_string
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.selectors import (
    DEPLOYMENT_FIELDS,
    GPU_FIELDS,
    HOST_FIELDS,
    OP_FIELDS,
    REVISION_FIELDS,
    card_index,
    card_version,
    dashboard_cards,
)
from deployments.models import Deployment, DeploymentRevision, ModelVariant, Operation
from deployments.selectors.hosts import GPUS_SHOWN, host_cards
from hardware.models import GPU, GpuSample, Host

pytestmark = pytest.mark.django_db
TEMPLATES = ("dashboard/_host_card.html", "dashboard/_host_row.html")


@pytest.fixture
def fleet(catalog: None) -> list[Host]:
    """Hosts of every kind a card tells apart: serving, offline, demo, never seen, no revision,
    a GPU with no sample, a running operation, a queued one."""
    now = timezone.now()
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    hosts = [
        Host.objects.create(
            name="serving",
            last_heartbeat=now,
            nvml_available=True,
            engine_state={"running": True, "health": "healthy", "engine": "vllm", "revision_label": "r1", "port": 8000},
            engine_metrics={"requests_running": 3, "kv_cache_usage": 0.5},
        ),
        Host.objects.create(name="offline", last_heartbeat=now - timedelta(hours=3), engine_state={"running": False}),
        Host.objects.create(name="demo", is_demo=True),
        Host.objects.create(name="never"),
        Host.objects.create(name="bare", last_heartbeat=now, declared=True),
    ]
    for host in hosts[:4]:
        revision = DeploymentRevision.objects.create(
            host=host, number=1, engine="vllm", model_variant=variant, served_name="qwen", message="m"
        )
        Deployment.objects.create(host=host, active_revision=revision)
    for host in hosts:
        GPU.objects.bulk_create(
            [GPU(host=host, index=i, name="NVIDIA H200", memory_bytes=141 * 1024**3, power_limit_w=700) for i in (0, 1)]
        )
    gpu = GPU.objects.get(host=hosts[0], index=0)  # GPU 1 never reported
    GpuSample.objects.create(gpu=gpu, ts=now, util_pct=80, mem_used_bytes=100 * 1024**3, power_w=650, temp_c=70)
    revision = DeploymentRevision.objects.get(host=hosts[0])
    Operation.objects.create(kind="switch", host=hosts[0], revision=revision, state="running", stage="loading")
    Operation.objects.create(kind="benchmark", host=hosts[1], state="queued")
    return hosts


def versions() -> dict[str, str]:
    index = card_index()
    return {name: index.versions[pk] for pk, name in index.names.items()}


def test_one_query_gives_every_version_and_the_built_cards_carry_the_same(fleet: list[Host]) -> None:
    card_index()  # SQLite asks once per connection whether it has JSON
    with CaptureQueriesContext(connection) as queries:
        index = card_index()
    assert len(queries.captured_queries) == 1
    assert list(index.names.values()) == ["bare", "never", "offline", "serving", "demo"]
    assert len(set(index.versions.values())) == len(fleet)
    with CaptureQueriesContext(connection) as queries:
        cards = dashboard_cards(list(index.versions))
    assert len(queries.captured_queries) == 2  # the hosts with what their cards show; the GPUs' latest samples
    assert {card.host.pk: card.version for card in cards} == index.versions
    built = {card.host.name: card for card in cards}
    assert [g.gpu.index for g in built["serving"].gpus] == [0, 1]
    assert built["serving"].gpus[0].sample is not None and built["serving"].gpus[1].sample is None
    assert built["serving"].operation is not None and built["serving"].operation.revision.number == 1  # type: ignore[union-attr]
    assert built["offline"].operation is not None and built["offline"].operation.revision is None
    # They render as the cards of the host page and the API, which read hosts the usual way.
    usual = {card.host.name: card for card in host_cards()}
    for name, card in built.items():
        for template in TEMPLATES:
            ours = render_to_string(template, {"card": card}).replace(f'data-v="{card.version}"', "")
            assert ours == render_to_string(template, {"card": usual[name]}).replace('data-v=""', "")


def test_what_a_card_shows_moves_its_fingerprint(fleet: list[Host]) -> None:
    before = versions()
    GpuSample.objects.create(gpu=GPU.objects.get(host=fleet[0], index=1), ts=timezone.now(), util_pct=1)
    Operation.objects.filter(host=fleet[1]).update(state="failed", result={"rolled_back": True})
    Host.objects.filter(pk=fleet[4].pk).update(engine_metrics={"requests_running": 1})
    after = versions()
    assert [name for name in before if before[name] != after[name]] == ["bare", "offline", "serving"]
    (card,) = dashboard_cards([fleet[0].pk])
    assert "util 1%" in render_to_string(TEMPLATES[0], {"card": card})


def _other(field: models.Field, value: Any) -> Any:
    """A different value of this field's type."""
    if isinstance(field, models.JSONField):
        return {"changed": [1, 2]} if not isinstance(value, dict) or "changed" not in value else {}
    if isinstance(field, models.BooleanField):
        return not value
    if isinstance(field, models.DateTimeField):
        return (value or timezone.now()) - timedelta(days=40)
    if isinstance(field, models.FloatField):
        return (value or 0.0) + 0.25
    if isinstance(field, models.IntegerField | models.BigIntegerField | models.PositiveIntegerField):
        return (value or 0) + 7
    if isinstance(field, models.UUIDField):
        return value
    return f"{value or ''}-changed"[: field.max_length or 100]


# Each covered field, changed on the serving host's own rows: its version moves, the others' stay.
COVERED = [
    *((Host, name) for name in HOST_FIELDS),
    *((Deployment, name) for name in DEPLOYMENT_FIELDS),
    *((DeploymentRevision, name) for name in REVISION_FIELDS if name != "id"),
    (ModelVariant, "name"),
    *((GPU, name) for name in GPU_FIELDS if name != "id"),
    *((Operation, name) for name in OP_FIELDS if name not in ("id", "revision_id")),
]


@pytest.mark.parametrize(("model", "name"), COVERED, ids=[f"{m.__name__}.{n}" for m, n in COVERED])
def test_each_field_the_fingerprint_covers_moves_it(fleet: list[Host], model: type[models.Model], name: str) -> None:
    serving = fleet[0]
    rows = {
        Host: Host.objects.filter(pk=serving.pk),
        Deployment: Deployment.objects.filter(host=serving),
        DeploymentRevision: DeploymentRevision.objects.filter(host=serving),
        ModelVariant: ModelVariant.objects.filter(revisions__host=serving),
        GPU: GPU.objects.filter(host=serving, index=1),
        Operation: Operation.objects.filter(host=serving),
    }[model]
    field = model._meta.get_field(name)
    before = card_index().versions
    changed = {"index": 99, "state": "queued"}.get(name)  # a free index; a state still on the card
    rows.update(
        **{field.attname: changed if changed is not None else _other(field, getattr(rows.get(), field.attname))}
    )
    after = card_index().versions
    assert after[serving.pk] != before[serving.pk], f"{model.__name__}.{name} shows on the card: it must move it"
    if model is not ModelVariant:  # the other hosts' revisions are of the same model
        assert {k: v for k, v in after.items() if k != serving.pk} == {
            k: v for k, v in before.items() if k != serving.pk
        }


def test_samples_gpus_and_operations_move_it_exactly_when_the_card_changes(fleet: list[Host]) -> None:
    serving = fleet[0]
    gpu = GPU.objects.get(host=serving, index=0)
    other = DeploymentRevision.objects.create(
        host=serving, number=2, engine="vllm", model_variant=ModelVariant.objects.first(), message="m"
    )
    now = timezone.now()
    steps: list[tuple[str, Any, bool]] = [
        (
            "an older sample stored late",
            lambda: GpuSample.objects.create(gpu=gpu, ts=now - timedelta(minutes=5)),
            False,
        ),
        ("a rollup", lambda: GpuSample.objects.create(gpu=gpu, ts=now, resolution_s=60, util_pct=5), False),
        ("a newer sample", lambda: GpuSample.objects.create(gpu=gpu, ts=now + timedelta(seconds=10)), True),
        ("the operation's revision", lambda: Operation.objects.filter(host=serving).update(revision=other), True),
        ("the operation's log", lambda: Operation.objects.filter(host=serving).update(log="line\n" * 50), False),
        (
            "a finished operation",
            lambda: Operation.objects.create(kind="probe", host=serving, state="succeeded"),
            False,
        ),
        ("a GPU past the first 64", lambda: _gpus(serving, 64), True),
        ("a sample of a GPU past them", lambda: _sample_of(serving, GPUS_SHOWN + 1), False),
        ("the active revision", lambda: Deployment.objects.filter(host=serving).update(active_revision=other), True),
    ]
    for what, change, moves in steps:
        before = versions()["serving"]
        change()
        assert (versions()["serving"] != before) is moves, what


def _gpus(host: Host, count: int) -> None:
    GPU.objects.bulk_create([GPU(host=host, index=i, name="NVIDIA H200", memory_bytes=1) for i in range(2, count + 2)])


def _sample_of(host: Host, index: int) -> None:
    GpuSample.objects.create(gpu=GPU.objects.get(host=host, index=index), ts=timezone.now(), util_pct=50)


def _render_all() -> dict[str, str]:
    """Every host's card and table row."""
    cards = dashboard_cards(list(card_index().versions))
    return {c.host.name: "".join(render_to_string(t, {"card": c}) for t in TEMPLATES) for c in cards}


LEFT_OUT = [
    (Host, HOST_FIELDS + ("id", "last_heartbeat")),
    (DeploymentRevision, REVISION_FIELDS + ("host_id", "model_variant_id")),
    (ModelVariant, ("id", "name")),
    (GPU, GPU_FIELDS + ("host_id",)),
    (Operation, OP_FIELDS + ("host_id",)),
]


@pytest.mark.parametrize(("model", "covered"), LEFT_OUT, ids=[m.__name__ for m, _ in LEFT_OUT])
def test_a_field_the_fingerprint_leaves_out_changes_nothing_a_card_shows(
    fleet: list[Host], model: type[models.Model], covered: tuple[str, ...]
) -> None:
    """Every other column, changed on every row: the same versions and the same cards, byte for
    byte (the fingerprint and so the cached rendering would not move, so the card must not
    either)."""
    shown, before = _render_all(), versions()
    left_out = [f for f in model._meta.concrete_fields if f.attname not in covered and not f.is_relation]
    assert left_out, "nothing to check"
    for f in left_out:
        for obj in model.objects.all():
            if not (f.unique or f.primary_key):
                model.objects.filter(pk=obj.pk).update(**{f.attname: _other(f, getattr(obj, f.attname))})
        assert _render_all() == shown, f"{model.__name__}.{f.name} shows on a card: add it to the fingerprint"
    assert versions() == before


def test_which_hosts_need_attention_and_why(fleet: list[Host]) -> None:
    Host.objects.filter(name="bare").update(engine_state={"running": False})  # no revision: nothing to serve
    serving = Host.objects.get(name="serving")
    reasons = {c.host.name: c.attention for c in host_cards()}
    assert reasons == {"serving": "", "offline": "offline", "demo": "", "never": "offline", "bare": ""}
    Host.objects.filter(pk=serving.pk).update(engine_state={"running": False, "phase": "crashed"})
    GpuSample.objects.create(gpu=GPU.objects.get(host=fleet[4], index=0), ts=timezone.now(), temp_c=88)
    reasons = {c.host.name: c.attention for c in host_cards()}
    assert reasons["serving"] == "not serving" and reasons["bare"] == "GPU at 88 °C"


def test_a_card_of_a_host_long_away_does_not_change_every_minute() -> None:
    """The card says how long ago in one unit: after hours away it changes hourly, not each
    minute (at a hundred hosts, every away host's card was sent again every minute)."""
    now = timezone.now()

    def at(last: Any, when: Any) -> str:
        return card_version("f" * 32, last, when, {})

    hours_ago, minutes_ago = now - timedelta(hours=3, minutes=10), now - timedelta(minutes=5)
    assert at(hours_ago, now) == at(hours_ago, now + timedelta(minutes=1))
    assert at(hours_ago, now) != at(hours_ago, now + timedelta(hours=1))
    assert at(minutes_ago, now) != at(minutes_ago, now + timedelta(minutes=1))


def test_a_front_door_report_moves_the_card_when_its_line_changes_and_not_for_idle_seconds(fleet: list[Host]) -> None:
    from deployments.services.front_door import front_door_report

    serving = fleet[0]

    def report(phase: str, waiting: int, idle_s: float) -> dict[int, str]:
        row = {"name": "m-r1", "phase": phase, "in_flight": 0, "waiting": waiting, "idle_s": idle_s}
        row |= {"aliases": ["coder"], "memory": {"gpu0": 1 << 30}}
        front_door_report(host=serving, version="v1", bind="127.0.0.1:4000", state=[row], usage=[])
        return card_index().versions

    first = report("loaded", 0, 1.0)
    assert report("loaded", 0, 7.5) == first  # a new report, the same line: no card is sent
    moved = report("loading", 2, 0.0)
    assert moved[serving.pk] != first[serving.pk]
    assert {k: v for k, v in moved.items() if k != serving.pk} == {k: v for k, v in first.items() if k != serving.pk}
    card = dashboard_cards([serving.pk])[0]
    assert card.door == {
        "loaded": 0,
        "idle": 0,
        "loading": 1,
        "waiting": 2,
        "planned": 1 << 30,
        "aliases": [["coder", "m-r1"]],
    }
    html = render_to_string("dashboard/_host_card.html", {"card": card})
    assert "1 loading" in html and "2 waiting" in html and "1 GiB</span> planned" in html
