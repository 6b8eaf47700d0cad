"""A lab's history as a user would miss it, and its fingerprint: the demo labs (hosts, GPUs,
revision chains, what each serves), a secret per host, a finished benchmark and the audit trail.
Backup and upgrade tests build it, then compare fingerprints before and after. Runs inside
Django (a test, or `manage.py shell -c` for the embedded default's SQLite)."""

from __future__ import annotations

from typing import Any

SECRET_VALUES = {"hf": "hf_backup_test_token", "api": "sk-backup-test-key"}


def build_history() -> dict[str, Any]:
    from django.contrib.auth.models import Group, User

    from deployments.models import BenchmarkRun, Operation, active_revision_of
    from deployments.services.demo import demo_load
    from deployments.services.secrets import secret_set

    admin = User.objects.create_user(username="restorer", password="restorer-pass-123")
    admin.groups.add(Group.objects.get_or_create(name="admin")[0])
    for host in demo_load(actor=admin):
        secret_set(host=host, name="hf", value=SECRET_VALUES["hf"], hub_token=True, actor=admin)
        secret_set(host=host, name="api", value=SECRET_VALUES["api"], actor=admin)
        revision = active_revision_of(host)
        op = Operation.objects.create(kind="benchmark", host=host, revision=revision, state="succeeded")
        BenchmarkRun.objects.create(
            revision=revision,
            operation=op,
            profile_name="quick",
            engine=revision.engine,
            status="succeeded",
            results={"levels": [{"label": "c1", "decode_tok_s": 41.5, "ttft_ms_p50": 180.0}]},
            energy_j=1234.5,
        )
    return fingerprint()


def fingerprint() -> dict[str, Any]:
    """What the history pages show, as plain data (secrets: whether each decrypts to its value)."""
    from django.contrib.auth.models import User

    from core.models import AuditEvent
    from deployments.models import BenchmarkRun, Secret, active_revision_of
    from deployments.services.secrets import secret_reveal
    from hardware.models import Host

    hosts = {}
    for host in Host.objects.filter(is_demo=True).order_by("name"):
        active = active_revision_of(host)
        hosts[host.name] = {
            "gpus": host.gpus.count(),
            "revisions": list(host.revisions.order_by("number").values_list("number", "parent__number", "message")),
            "active": active.number if active else None,
            "secrets_decrypt": sorted(
                s.name
                for s in Secret.objects.filter(host=host)
                if secret_reveal(host=host, name=s.name) == SECRET_VALUES[s.name]
            ),
        }
    return {
        "hosts": hosts,
        "users": sorted(User.objects.values_list("username", flat=True)),
        "benchmarks": sorted(BenchmarkRun.objects.values_list("revision__host__name", "results", "energy_j")),
        "audit": list(AuditEvent.objects.order_by("pk").values_list("action", "summary", "actor__username")),
    }
