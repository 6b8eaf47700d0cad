"""Record (or remove) the seed labs as offline demo hosts with their histories."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from core.audit import audit_record
from deployments.demo_data import DEMO_HOSTS
from deployments.models import Deployment, ModelVariant
from deployments.runtime_bridge import spec_for_values
from hardware.models import GpuType, Host
from hardware.services import host_declare

from .catalog import catalog_load
from .revisions import revision_create, revision_mark_active

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


@transaction.atomic
def demo_load(*, actor: AbstractUser | None = None) -> list[Host]:
    catalog_load(actor=actor)
    hosts = []
    for spec in DEMO_HOSTS:
        if Host.objects.filter(name=spec["name"]).exists():
            continue
        gpus = [(GpuType.objects.get(short_name=short), count) for short, count in spec["gpus"]]
        host = host_declare(name=spec["name"], address=spec["address"], gpus=gpus, is_demo=True, actor=actor)
        revision = None
        for rev in spec["revisions"]:
            rev_spec = spec_for_values(
                engine=rev["engine"],
                engine_version=rev["engine_version"],
                model=ModelVariant.objects.get(name=rev["model"]),
                knobs=rev["knobs"],
                env=rev["env"],
                served_name=rev.get("served_name", ""),
                port=rev["port"],
            )
            revision = revision_create(
                host=host, spec=rev_spec, tag=rev.get("tag", ""), message=rev["message"], actor=actor
            )
        if revision is not None:
            revision_mark_active(revision=revision, actor=actor, reason="demo history")
        hosts.append(host)
    return hosts


@transaction.atomic
def demo_remove(*, actor: AbstractUser | None = None) -> int:
    hosts = list(Host.objects.filter(is_demo=True))
    for host in hosts:
        Deployment.objects.filter(host=host).update(active_revision=None)
        host.operations.all().delete()
        host.delete()
    if hosts:
        audit_record(action="demo.remove", summary=f"removed {len(hosts)} demo host(s)", actor=actor)
    return len(hosts)
