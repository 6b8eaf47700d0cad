"""An upgrade over a lab's history loses nothing: a database made at an earlier state of the
migrations, filled with the demo labs' data (hosts, GPUs, revision chains, what each serves), a
finished benchmark with its operation, secrets and the audit trail, written with that state's own
(historical) models, migrates forward to this code's migrations, and the panel then shows the same
history and decrypts the same secrets; no table has fewer rows than before.

The earlier states, chosen where the data changed shape (not every one of the migrations):
- `first`: the first release (the foundation's deployments 0002_initial and what it needs);
- `before-split`: the audit trail still deployments', hosts pointing at their served revision;
- `previous`: every app one migration behind this code (found from the graph, so a new migration
  on main moves it along by itself).
tests/test_app_split_migrations.py pins the split's own row moves."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from core.backup_db import table_counts
from deployments.catalog_data import GPU_TYPES, MODEL_VARIANTS
from deployments.demo_data import DEMO_HOSTS
from deployments.services.secrets import _fernet  # the key derivation is part of what an upgrade keeps
from tests.support.history import SECRET_VALUES, fingerprint

pytestmark = pytest.mark.django_db(transaction=True)

STATES = ("first", "before-split", "previous")
OURS = ("core", "hardware", "deployments", "notifications", "api", "people")
ANCHORS = {"first": [("deployments", "0002_initial")], "before-split": [("deployments", "0005_revision_port_default")]}


def _state(name: str) -> list[tuple[str, str | None]]:
    """Migration targets for our apps: per app its last node in the state (None: not yet there)."""
    graph = MigrationExecutor(connection).loader.graph
    leaves = {n for n in graph.leaf_nodes() if n[0] in OURS}
    if name == "previous":  # each app's last migration undone, where nothing of another app needs it
        nodes = {n for n in graph.nodes if n[0] in OURS} - {n for n in leaves if not graph.node_map[n].children}
    else:
        nodes = {n for anchor in ANCHORS[name] for n in graph.forwards_plan(anchor)}
    targets: list[tuple[str, str | None]] = []
    for app in OURS:
        mine = [n for n in nodes if n[0] == app]
        last = [n for n in mine if not any(c in mine for c in graph.node_map[n].children)]
        targets.append(last[0] if last else (app, None))
    return targets


def _migrate(targets: list[tuple[str, str | None]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state([t for t in targets if t[1]]).apps


def _latest() -> list[tuple[str, str | None]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _new(model: Any, **values: Any) -> Any:
    """A row with the values this state's model has fields for."""
    names = {f.name for f in model._meta.concrete_fields}
    return model.objects.create(**{k: v for k, v in values.items() if k in names})


def _model(old: Any, *labels: str) -> Any:
    for label in labels:
        try:
            return old.get_model(label)
        except LookupError:
            continue
    return None


def _seed(old: Any, stage: str, expected: dict[str, Any]) -> None:
    """The demo labs' history, as `stage`'s hosts, written with the historical models; adds to
    `expected` what the current panel must show for it (tests/support/history.py's fingerprint)."""
    admin = old.get_model("auth", "User").objects.create(username=f"admin-{stage}")
    Host, GPU, GpuType = (old.get_model("hardware", m) for m in ("Host", "GPU", "GpuType"))
    Variant, Revision, Operation, Run, Secret = (
        old.get_model("deployments", m)
        for m in ("ModelVariant", "DeploymentRevision", "Operation", "BenchmarkRun", "Secret")
    )
    Audit = _model(old, "core.AuditEvent", "deployments.AuditEvent")
    Deployment = _model(old, "deployments.Deployment")
    if not GpuType.objects.exists():  # the catalog, once
        for data in GPU_TYPES:
            _new(GpuType, **data)
        for data in MODEL_VARIANTS:
            _new(Variant, **data)
    expected["users"].append(admin.username)
    for spec in DEMO_HOSTS:
        name = f"{stage}-{spec['name']}"
        host = _new(Host, name=name, address=spec["address"], queue=f"host.{name}", is_demo=True)
        gpus = 0
        for short, count in spec["gpus"]:
            kind = GpuType.objects.get(short_name=short)
            for index in range(count):
                _new(GPU, host=host, index=index, name=kind.name, memory_bytes=kind.memory_bytes, gpu_type=kind)
            gpus += count
        revision, chain = None, []
        for number, rev in enumerate(spec["revisions"], 1):
            revision = _new(
                Revision, host=host, number=number, parent=revision, author=admin,
                model_variant=Variant.objects.get(name=rev["model"]),
                **{k: rev[k] for k in ("engine", "engine_version", "knobs", "env", "port", "message")},
                served_name=rev.get("served_name", ""), tag=rev.get("tag", ""),
            )  # fmt: skip
            chain.append([number, number - 1 or None, rev["message"]])
            _new(
                Audit,
                action="revision.create",
                summary=f"r{number}",
                host=host,
                actor=admin,
                object_id=str(revision.pk),
            )
            expected["audit"].append(["revision.create", f"r{number}", admin.username])
        if Deployment is None:
            Host.objects.filter(pk=host.pk).update(active_revision=revision)
        else:
            Deployment.objects.create(host=host, active_revision=revision)
        op = _new(Operation, kind="benchmark", host=host, revision=revision, state="succeeded", requested_by=admin)
        results = {"levels": [{"label": "c1", "decode_tok_s": 23.0}]}
        _new(Run, revision=revision, operation=op, profile_name="quick", engine=revision.engine, status="succeeded",
             results=results, energy_j=1100.0)  # fmt: skip
        expected["benchmarks"].append([name, results, 1100.0])
        for secret, value in SECRET_VALUES.items():
            _new(Secret, host=host, name=secret, ciphertext=_fernet().encrypt(value.encode()))
        expected["hosts"][name] = {
            "gpus": gpus, "revisions": chain, "active": len(chain), "secrets_decrypt": sorted(SECRET_VALUES),
        }  # fmt: skip


def _counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        return table_counts(cursor, connection.alias, connection.introspection.table_names(cursor))


def _as_lists(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _as_lists(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_as_lists(v) for v in data]
    return data


def test_a_lab_grown_through_the_earlier_states_migrates_forward_with_nothing_lost():
    """One trip back and forward (seconds, not one per state): at each state in turn, the demo labs
    are added as that state's hosts; each step forward and the last one to this code keep every row."""
    expected: dict[str, Any] = {"hosts": {}, "users": [], "benchmarks": [], "audit": []}
    try:
        for stage in STATES:
            before = _counts()
            _seed(_migrate(_state(stage)), stage, expected)
            assert _fewer(before, _counts()) == {} or stage == STATES[0], stage
        before = _counts()
        _migrate(_latest())
        assert _fewer(before, _counts()) == {}, "tables with fewer rows after the upgrade"
        expected["benchmarks"].sort()
        expected["users"].sort()
        assert _as_lists(fingerprint()) == expected
    finally:
        _migrate(_latest())  # whatever happened, the next test finds the current schema


def _fewer(before: dict[str, int], after: dict[str, int]) -> dict[str, tuple[int, int]]:
    return {t: (n, after.get(t, 0)) for t, n in before.items() if after.get(t, 0) < n}
