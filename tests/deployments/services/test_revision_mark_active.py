"""Pointing a host at a revision (revision_mark_active) for the first time from two reports at
once: real PostgreSQL, two real transactions (tests.support.locks)."""

from __future__ import annotations

import pytest

from core.models import AuditEvent
from deployments.models import Deployment, DeploymentRevision, ModelVariant
from deployments.services.revisions import revision_mark_active
from hardware.credentials import host_token_issue
from tests.support.locks import Background, held_open, wait_for_a_lock_wait
from tests.support.revisions import make_revision


def _point_at(pk: int, reason: str) -> None:
    revision = DeploymentRevision.objects.select_related("host").get(pk=pk)  # each transaction its own rows
    revision_mark_active(revision=revision, actor=None, reason=reason)


@pytest.mark.django_db(transaction=True)
def test_a_hosts_first_pointer_set_by_two_reports_at_once_ends_at_the_later_with_its_previous(
    catalog: None, admin_user, operator
):
    """The register's pointer not yet committed when the heartbeat's comes: the heartbeat waits
    for it and moves the pointer on from it. Before, both found no Deployment row and inserted
    one; the second failed on deployments_deployment_pkey (IntegrityError: its report answered 500)."""
    host, _ = host_token_issue(name="alpha", actor=admin_user)
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    r1, r2 = (make_revision(host=host, engine="vllm", model_variant=variant, message=m, actor=operator) for m in "ab")
    with held_open(lambda: _point_at(r1.pk, "register")):
        heartbeat = Background(lambda: _point_at(r2.pk, "heartbeat"))
        wait_for_a_lock_wait()  # the heartbeat waits on the register's row
    heartbeat.result()
    deployment = Deployment.objects.get(host=host)
    assert (deployment.active_revision_id, deployment.serving) == (r2.pk, True)
    moves = AuditEvent.objects.filter(action="host.activate").order_by("pk")
    said = [(e.data["reason"], e.data["previous_revision_id"]) for e in moves]
    assert said == [("register", None), ("heartbeat", r1.pk)]
