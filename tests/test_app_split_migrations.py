"""A database made before the apps were untangled migrates forward without losing a row: the
audit trail moves to `core` in state only (same table, same rows), and what each host serves
moves from `hardware_host.active_revision_id` to `deployments.Deployment`."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

# The last migrations before the split: hosts still pointed at revisions, and the audit trail
# was deployments'. Every app is rolled back only as far as these need.
BEFORE = [("hardware", "0005_host_credential"), ("deployments", "0005_revision_port_default"), ("core", None)]


def _migrate(targets: list[tuple[str, str | None]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor


def _latest() -> list[tuple[str, str | None]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def test_rows_made_before_the_split_are_all_there_after_it():
    try:
        old = _migrate(BEFORE).loader.project_state(BEFORE[:2]).apps
        User = old.get_model("auth", "User")
        Host = old.get_model("hardware", "Host")
        Variant = old.get_model("deployments", "ModelVariant")
        Revision = old.get_model("deployments", "DeploymentRevision")
        Audit = old.get_model("deployments", "AuditEvent")
        admin = User.objects.create(username="old-admin")
        serving, idle = (
            Host.objects.create(name="serving", queue="host.serving"),
            Host.objects.create(name="idle", queue="host.idle"),
        )
        variant = Variant.objects.create(name="m")
        r1 = Revision.objects.create(host=serving, number=1, engine="vllm", model_variant=variant, message="one")
        r2 = Revision.objects.create(host=serving, number=2, engine="vllm", model_variant=variant, message="two")
        Host.objects.filter(pk=serving.pk).update(active_revision=r2)
        Audit.objects.create(action="host.activate", summary="serving now serves r2", host=serving, actor=admin)
        Audit.objects.create(action="revision.create", summary="r1", host=serving, object_id=str(r1.pk))

        new = _migrate(_latest()).loader.project_state(_latest()).apps
        Deployment = new.get_model("deployments", "Deployment")
        events = new.get_model("core", "AuditEvent").objects.order_by("pk")
        assert [(e.action, e.host_id, e.actor_id) for e in events] == [
            ("host.activate", serving.pk, admin.pk),
            ("revision.create", serving.pk, None),
        ]
        assert list(Deployment.objects.values_list("host_id", "active_revision_id")) == [(serving.pk, r2.pk)]
        assert not Deployment.objects.filter(host_id=idle.pk).exists()
        assert new.get_model("deployments", "DeploymentRevision").objects.count() == 2
        assert "active_revision" not in {f.name for f in new.get_model("hardware", "Host")._meta.get_fields()}
    finally:
        _migrate(_latest())  # whatever happened, the next test finds the current schema

    # And the models the panel runs on read the same: the served revision, the audit rows.
    from core.models import AuditEvent
    from deployments.models import active_revision_of
    from hardware.models import Host as CurrentHost

    assert active_revision_of(CurrentHost.objects.get(name="serving")).number == 2
    assert active_revision_of(CurrentHost.objects.get(name="idle")) is None
    assert AuditEvent.objects.filter(host__name="serving").count() == 2
