"""The dashboard's card fingerprints, read as plain rows (deployments.selectors.dashboard), are
the ones the built cards compute, and a field they leave out changes nothing a card shows: a
cached card is never stale."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import models
from django.template.loader import render_to_string
from django.utils import timezone

from deployments.models import Deployment, DeploymentRevision, ModelVariant, Operation
from deployments.selectors.dashboard import HOST_FIELDS, REVISION_FIELDS, card_index
from deployments.selectors.hosts import host_cards
from hardware.models import GPU, GpuSample, Host

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(catalog: None) -> list[Host]:
    """Hosts of every kind a card tells apart: serving, offline, demo, never seen, no revision,
    a GPU with no sample, a running operation, a failed one rolled back, a queued one."""
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
    Operation.objects.create(kind="switch", host=hosts[0], state="running", stage="loading", progress=0.4)
    Operation.objects.create(kind="benchmark", host=hosts[1], state="queued")
    return hosts


def test_fingerprints_from_rows_match_the_built_cards(fleet: list[Host]) -> None:
    index = card_index()
    assert list(index.names.values()) == ["bare", "never", "offline", "serving", "demo"]
    for cards in (host_cards(), host_cards(hosts=Host.objects.all())):
        assert {card.host.pk: card.version for card in cards} == index.versions
    assert len(set(index.versions.values())) == len(fleet)


def test_what_a_card_shows_moves_its_fingerprint(fleet: list[Host]) -> None:
    serving = fleet[0]
    before = card_index().versions
    GpuSample.objects.create(gpu=GPU.objects.get(host=serving, index=1), ts=timezone.now(), util_pct=1)
    Operation.objects.filter(host=fleet[1]).update(state="failed", result={"rolled_back": True})
    Host.objects.filter(pk=fleet[4].pk).update(engine_metrics={"requests_running": 1})
    after = card_index().versions
    assert [h.name for h in fleet if before[h.pk] != after[h.pk]] == ["serving", "offline", "bare"]
    cards = {c.host.name: c for c in host_cards()}
    assert "util 1%" in render_to_string("dashboard/_host_card.html", {"card": cards["serving"]})


def _other(field: models.Field, value: Any) -> Any:
    """A different value of this field's type."""
    if isinstance(field, models.JSONField):
        return {"changed": [1, 2]} if not isinstance(value, dict) or "changed" not in value else {}
    if isinstance(field, models.BooleanField):
        return not value
    if isinstance(field, models.DateTimeField):
        return timezone.now() - timedelta(days=40)
    if isinstance(field, models.IntegerField | models.BigIntegerField | models.PositiveIntegerField):
        return (value or 0) + 7
    return f"{value or ''}-changed"[: field.max_length or 100]


def _render_all() -> dict[str, str]:
    """Every host's card and table row."""
    return {
        c.host.name: "".join(
            render_to_string(template, {"card": c})
            for template in ("dashboard/_host_card.html", "dashboard/_host_row.html")
        )
        for c in host_cards(hosts=Host.objects.all())
    }


@pytest.mark.parametrize(
    ("model", "covered", "through"),
    [
        (Host, HOST_FIELDS + ("last_heartbeat",), None),
        (DeploymentRevision, REVISION_FIELDS + ("host_id",), "revision"),
    ],
)
def test_a_field_the_fingerprint_leaves_out_changes_nothing_a_card_shows(
    fleet: list[Host], model: type[models.Model], covered: tuple[str, ...], through: str | None
) -> None:
    """Every other column, changed on every row: the same cards, byte for byte (the fingerprint
    and so the cached rendering would not move, so the card must not either)."""
    shown = _render_all()
    left_out = [f for f in model._meta.concrete_fields if f.attname not in covered and not f.is_relation]
    assert left_out, "nothing to check"
    for f in left_out:
        for obj in model.objects.all():
            model.objects.filter(pk=obj.pk).update(**{f.attname: _other(f, getattr(obj, f.attname))})
        assert _render_all() == shown, f"{model.__name__}.{f.name} shows on a card: add it to the fingerprint"


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
    from deployments.selectors.dashboard import fingerprint

    now = timezone.now()

    def at(last: Any, when: Any) -> str:
        return fingerprint((1, "h"), last, (), "", [], (), None, when)

    hours_ago, minutes_ago = now - timedelta(hours=3, minutes=10), now - timedelta(minutes=5)
    assert at(hours_ago, now) == at(hours_ago, now + timedelta(minutes=1))
    assert at(hours_ago, now) != at(hours_ago, now + timedelta(hours=1))
    assert at(minutes_ago, now) != at(minutes_ago, now + timedelta(minutes=1))
