"""The automation API (/api/v1/) against real PostgreSQL and Redis: every endpoint x role
(no token, a revoked token, viewer, operator, admin), bad input as 400 with field errors, the
OpenAPI document validated by openapi-spec-validator, and what the calls change (revisions,
operations, audit events) as a user of the pages would see it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from api.models import ApiToken
from api.tokens import token_create, token_revoke
from core.models import AuditEvent
from deployments.models import BenchmarkRun, DeploymentRevision, ModelVariant, Operation
from deployments.services.revisions import revision_mark_active
from hardware.models import Host
from tests.hardware.factories import GPUFactory, HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

QWEN = "Qwen3.8-27B-W4A16-AWQ"
KNOBS = {"tensor_parallel_size": 2, "max_model_len": 32768, "gpu_memory_utilization": 0.9}


@pytest.fixture
def world(catalog: None, operator: User) -> dict[str, Any]:
    """A host with two GPUs, r1 active and r2 recorded, and a finished benchmark on r1."""
    host = HostFactory(
        name="lab",
        address="lab.lan",
        last_heartbeat=timezone.now(),
        nvml_available=True,
        engine_installs={"vllm": {"0.17.0": {"path": "/opt/venvs/vllm-0.17.0"}}},
    )
    for i in range(2):
        GPUFactory(host=host, index=i, name="NVIDIA GeForce RTX 3090", memory_bytes=24 << 30)
    model = ModelVariant.objects.get(name=QWEN)
    r1 = make_revision(
        host=host,
        engine="vllm",
        engine_version="0.17.0",
        model_variant=model,
        knobs=KNOBS,
        message="first",
        served_name="qwen",
        port=8001,
        actor=operator,
    )
    revision_mark_active(revision=r1, actor=operator)
    make_revision(
        host=host,
        engine="vllm",
        engine_version="0.17.0",
        model_variant=model,
        knobs={**KNOBS, "max_model_len": 16384},
        message="second",
        served_name="qwen",
        port=8001,
        actor=operator,
    )
    from deployments.services.aliases import alias_set
    from deployments.services.inference_keys import key_create

    alias_set(host=host, name="coder", revision=r1, actor=operator)
    key_create(name="ci", actor=None)
    runs = [
        BenchmarkRun.objects.create(
            revision=r1,
            profile_name="quick",
            profile={"name": "quick"},
            engine="vllm",
            status="completed",
            results={"levels": [{"label": "c=1", "output_tokens_per_s": tps, "ttft_ms": {"p50": 50.0}}]},
        )
        for tps in (100.0, 80.0)
    ]
    from django.contrib.auth.models import Group

    from changes.binding import resolve
    from changes.models import ChangeRequest
    from changes.services import host_state

    author = User.objects.create_user(username="pat")  # another operator's request: anyone else may decide it
    author.groups.add(Group.objects.get_or_create(name="operator")[0])
    change = ChangeRequest.objects.create(
        host=host,
        kind="switch",
        params={"revision": 2},
        summary="Switch lab to r2 (now r1)",
        author=author,
        base=host_state(host),
    )
    change.bound = resolve(change)  # what an approval of it covers, as change_open_from records it
    change.save(update_fields=["bound"])

    from datetime import time, timedelta

    from schedules.services import change_schedule, window_set

    window_set(host=host, weekdays=[0, 1, 2, 3, 4, 5, 6], start=time(2), end=time(4), tz="UTC", actor=operator)
    at = timezone.now() + timedelta(days=1)
    scheduled = change_schedule(kind="switch", host=host, params={"revision": 2}, at=at, actor=operator)

    from hardware.services import host_tags_set
    from rollouts.models import Rollout

    host_tags_set(host=host, tags=["fleet"], actor=operator)
    rollouts = [  # one running, one paused, neither holding a host
        Rollout.objects.create(group="fleet", kind="revision", change={"set": {"threads": 4}}, state=state)
        for state in ("running", "paused")
    ]
    tuned = _finished_tuning_run(host, base=r1, best=DeploymentRevision.objects.get(host=host, number=2))
    return {
        "host": host,
        "runs": runs,
        "change": change,
        "scheduled": scheduled,
        "rollouts": rollouts,
        "tuning": tuned,
    }


def _finished_tuning_run(host: Host, *, base: DeploymentRevision, best: DeploymentRevision) -> Any:
    """A tuning run that ended with trial 1 (r2) beating the base (r1) beyond noise."""
    from tuning.models import TuningRun, TuningTrial

    level = "concurrency 1"
    run = TuningRun.objects.create(
        host=host,
        base=base,
        space={"max_model_len": [16384]},
        objective={"metric": "throughput", "level": level},
        profile={"name": "quick", "concurrency": [1]},
        state=TuningRun.State.SUCCEEDED,
        stage=TuningRun.Stage.DONE,
        verdict={"beats_base": True, "summary": "+25.0 % over the base, beyond noise", "best": 1, "base": 0},
        finished_at=timezone.now(),
    )
    for number, revision, value in ((0, base, 80.0), (1, best, 100.0)):
        figures = {level: {"throughput": value, "decode": value, "ttft_p95": 200.0}}
        TuningTrial.objects.create(
            run=run,
            number=number,
            knobs={"max_model_len": 16384} if number else {},
            revision=revision,
            state=TuningTrial.State.MEASURED,
            rounds=[{"run": None, "figures": figures, "value": value}],
            value=value,
            passed=True,
        )
    run.best = run.trials.get(number=1)
    run.save(update_fields=["best"])
    return run


def _open_tuning_run(world: dict[str, Any]) -> int:
    """A running tuning run on lab, made only for the path that cancels one (a host holds one open run
    at a time, and the table also starts one)."""
    from tuning.models import TuningRun

    run = TuningRun.objects.create(
        host=world["host"],
        base=world["tuning"].base,
        space={"max_model_len": [16384]},
        objective={"metric": "throughput", "level": "concurrency 1"},
        profile={"name": "quick", "concurrency": [1]},
        stage=TuningRun.Stage.BASE,
    )
    return int(run.pk)


def _token(user: User | None) -> str:
    return token_create(user=user, name="test", actor=user).secret if user else ""


def call(client: Any, method: str, path: str, token: str = "", body: Any = None) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    kwargs: dict[str, Any] = {}
    if body is not None:
        kwargs = {"data": json.dumps(body) if not isinstance(body, str) else body, "content_type": "application/json"}
    return getattr(client, method.lower())(path, **kwargs, **headers)


# (method, path, body, lowest role, status for that role)
ENDPOINTS: list[tuple[str, str, Any, str, int]] = [
    ("GET", "/api/v1/hosts/", None, "viewer", 200),
    ("GET", "/api/v1/hosts/lab/", None, "viewer", 200),
    ("GET", "/api/v1/hosts/lab/events/", None, "viewer", 200),
    ("GET", "/api/v1/models/", None, "viewer", 200),
    ("GET", f"/api/v1/models/{QWEN}/", None, "viewer", 200),
    ("GET", "/api/v1/hosts/lab/revisions/", None, "viewer", 200),
    ("GET", "/api/v1/hosts/lab/revisions/2/", None, "viewer", 200),
    ("GET", "/api/v1/hosts/lab/revisions/1/diff/2/", None, "viewer", 200),
    ("GET", "/api/v1/hosts/lab/revisions/2/exports/systemd/", None, "viewer", 200),
    ("POST", "/api/v1/hosts/lab/revisions/", {"set": {"max_model_len": 8192}, "message": "api"}, "operator", 201),
    ("POST", "/api/v1/hosts/lab/switch/", {"revision": 2}, "operator", 202),
    ("POST", "/api/v1/hosts/lab/benchmarks/", {"profile": "quick"}, "operator", 202),
    ("GET", "/api/v1/hosts/lab/benchmarks/", None, "viewer", 200),
    ("GET", "/api/v1/benchmarks/{run}/", None, "viewer", 200),
    ("GET", "/api/v1/benchmarks/compare/{run}/{run2}/", None, "viewer", 200),
    ("GET", "/api/v1/operations/{op}/", None, "viewer", 200),
    ("GET", "/api/v1/operations/{op}/log/", None, "viewer", 200),
    ("POST", "/api/v1/operations/{op}/cancel/", None, "operator", 202),
    ("GET", "/api/v1/hosts/lab/serving/", None, "viewer", 200),
    ("PUT", "/api/v1/hosts/lab/serving/2/", {"mode": "off"}, "operator", 200),
    ("GET", "/api/v1/hosts/lab/aliases/", None, "viewer", 200),
    ("PUT", "/api/v1/hosts/lab/aliases/fast/", {"revision": 1}, "operator", 200),
    ("DELETE", "/api/v1/hosts/lab/aliases/coder/", None, "operator", 200),
    ("GET", "/api/v1/keys/", None, "admin", 200),
    ("POST", "/api/v1/keys/", {"name": "app", "models": ["coder"]}, "admin", 201),
    ("POST", "/api/v1/keys/ci/revoke/", None, "admin", 200),
    ("GET", "/api/v1/usage/?by=revision&days=7", None, "viewer", 200),
    ("GET", "/api/v1/changes/", None, "viewer", 200),
    ("POST", "/api/v1/changes/", {"host": "lab", "kind": "switch", "revision": 2}, "operator", 201),
    ("GET", "/api/v1/changes/{change}/", None, "viewer", 200),
    ("POST", "/api/v1/changes/{change}/approve/", {"comment": "ok"}, "operator", 200),
    ("POST", "/api/v1/changes/{change}/reject/", {}, "operator", 200),
    ("POST", "/api/v1/changes/{change}/decide/", {"verdict": "comment", "comment": "hm"}, "operator", 200),
    ("GET", "/api/v1/schedules/?host=lab", None, "viewer", 200),
    ("POST", "/api/v1/schedules/", {"kind": "switch", "host": "lab", "revision": 2, "window": True}, "operator", 201),
    ("POST", "/api/v1/schedules/{scheduled}/cancel/", None, "operator", 200),
    ("PUT", "/api/v1/hosts/lab/tags/", {"tags": ["fleet", "edge"]}, "operator", 200),
    ("GET", "/api/v1/rollouts/", None, "viewer", 200),
    (
        "POST",
        "/api/v1/rollouts/",
        {"group": "fleet", "set": {"max_model_len": 8192}, "message": "api"},
        "operator",
        201,
    ),
    ("GET", "/api/v1/rollouts/{rollout}/", None, "viewer", 200),
    ("POST", "/api/v1/rollouts/{rollout}/pause/", None, "operator", 200),
    ("POST", "/api/v1/rollouts/{paused}/resume/", None, "operator", 200),
    ("POST", "/api/v1/rollouts/{rollout}/cancel/", None, "operator", 200),
    ("GET", "/api/v1/tuning/?host=lab", None, "viewer", 200),
    ("GET", "/api/v1/tuning/{tuning}/", None, "viewer", 200),
    ("POST", "/api/v1/hosts/lab/tuning/", {"space": {"max_model_len": [8192, 16384]}}, "operator", 201),
    ("POST", "/api/v1/tuning/{tuning}/propose/", {}, "operator", 200),
    ("POST", "/api/v1/tuning/{tuning_open}/cancel/", None, "operator", 200),
]
RANK = {"viewer": 1, "operator": 2, "admin": 3}


def _fill(path: str, world: dict[str, Any], op: Operation) -> str:
    rollouts = {"rollout": world["rollouts"][0].pk, "paused": world["rollouts"][1].pk}
    return path.format(
        run=world["runs"][0].pk,
        run2=world["runs"][1].pk,
        op=op.pk,
        change=world["change"].pk,
        scheduled=world["scheduled"].pk,
        tuning=world["tuning"].pk,
        tuning_open=_open_tuning_run(world) if "{tuning_open}" in path else 0,
        **rollouts,
    )


@pytest.mark.parametrize("method,path,body,lowest,ok", ENDPOINTS, ids=[f"{m} {p}" for m, p, *_ in ENDPOINTS])
@pytest.mark.parametrize("role", ["none", "revoked", "viewer", "operator", "admin"])
def test_every_endpoint_by_role(client, world, viewer, operator, admin_user, method, path, body, lowest, ok, role):
    users = {"viewer": viewer, "operator": operator, "admin": admin_user}
    op = Operation.objects.create(kind="probe", host=world["host"], state="running", exclusive=False)
    token = ""
    if role == "revoked":
        new = token_create(user=admin_user, name="old", actor=admin_user)
        token_revoke(token=new.token, actor=admin_user)
        token = new.secret
    elif role in users:
        token = _token(users[role])
    before = (DeploymentRevision.objects.count(), Operation.objects.count(), AuditEvent.objects.count())
    response = call(client, method, _fill(path, world, op), token, body)
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    if role in ("none", "revoked"):
        assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"
    elif RANK[role] < RANK[lowest]:
        assert response.status_code == 403, response.content
        assert (DeploymentRevision.objects.count(), Operation.objects.count()) == before[:2]
    else:
        assert response.status_code == ok, response.content
    if response.status_code >= 400:
        assert response.json()["detail"]


def test_the_openapi_document_validates_and_lists_every_endpoint(client):
    from openapi_spec_validator import validate

    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200  # readable without a token, so clients can generate code
    spec = response.json()
    validate(spec)
    paths = spec["paths"]
    covered: set[tuple[str, str]] = set()
    for method, path, *_ in ENDPOINTS:
        template = (
            path.replace(f"/{QWEN}/", "/{name}/")
            .replace("/lab/", "/{name}/")
            .replace("/revisions/2/", "/revisions/{number}/")
            .replace("/revisions/1/diff/2/", "/revisions/{a}/diff/{b}/")
            .replace("/exports/systemd/", "/exports/{target}/")
            .replace("/{run}/{run2}/", "/{a}/{b}/")
            .replace("/{run}/", "/{run_id}/")
            .replace("/{op}/", "/{op_id}/")
            .replace("/{change}/", "/{change_id}/")
            .replace("/serving/2/", "/serving/{number}/")
            .replace("/aliases/fast/", "/aliases/{alias}/")
            .replace("/aliases/coder/", "/aliases/{alias}/")
            .replace("/keys/ci/", "/keys/{key}/")
            .replace("/{scheduled}/", "/{change_id}/")
            .replace("/{rollout}/", "/{rollout_id}/")
            .replace("/{paused}/", "/{rollout_id}/")
            .replace("/{tuning}/", "/{run_id}/")
            .replace("/{tuning_open}/", "/{run_id}/")
            .split("?")[0]
        )
        assert method.lower() in paths[template], (method, template, sorted(paths))
        covered.add((method.lower(), template))
    # ... and the table above covers every operation the document describes.
    described = {(m, "/api/v1" + p if not p.startswith("/api/v1") else p) for p, ops in paths.items() for m in ops}
    assert described - covered == set()
    assert spec["components"]["securitySchemes"]["TokenAuth"]["scheme"] == "bearer"


def test_hosts_list_shows_gpus_live_state_and_the_active_revision(client, world, viewer):
    body = call(client, "GET", "/api/v1/hosts/", _token(viewer)).json()
    assert body["count"] == 1 and isinstance(body["items"], list)
    lab = body["items"][0]
    assert lab["name"] == "lab" and lab["online"] is True and lab["active_revision"] == 1
    assert [g["name"] for g in lab["gpus"]] == ["NVIDIA GeForce RTX 3090"] * 2
    assert lab["serving"] is False and lab["serving_status"] == "not reported"


def test_switch_answers_202_with_the_operation_and_records_who_asked(client, world, operator):
    response = call(client, "POST", "/api/v1/hosts/lab/switch/", _token(operator), {"revision": 2})
    assert response.status_code == 202
    op = response.json()
    assert op["kind"] == "switch" and op["revision"] == 2 and op["state"] == "queued" and not op["ended"]
    assert op["requested_by"] == "otto" and op["url"] == f"/operations/{op['id']}/"
    event = AuditEvent.objects.filter(action="operation.switch").latest("pk")
    assert event.actor == operator
    # The host is locked while it runs: a second request is a conflict, not a 500.
    again = call(client, "POST", "/api/v1/hosts/lab/switch/", _token(operator), {"revision": 1})
    assert again.status_code == 409 and "busy" in again.json()["detail"].lower() or "switch" in again.json()["detail"]
    followed = call(client, "GET", f"/api/v1/operations/{op['id']}/", _token(operator)).json()
    assert followed["id"] == op["id"] and followed["outcome"] == "Queued"


def test_a_revision_from_the_api_is_the_parent_with_changes(client, world, operator):
    token = _token(operator)
    response = call(
        client,
        "POST",
        "/api/v1/hosts/lab/revisions/",
        token,
        {
            "parent": 1,
            "set": {"max_model_len": 8192, "gpu_memory_utilization": None},
            "message": "shorter",
            "tag": "ci",
        },
    )
    assert response.status_code == 201, response.content
    rev = response.json()
    assert rev["number"] == 3 and rev["parent"] == 1 and rev["tag"] == "ci" and rev["author"] == "otto"
    assert rev["knobs"] == {"tensor_parallel_size": 2, "max_model_len": 8192}
    assert "--max-model-len" in rev["argv"] and "8192" in rev["argv"]
    diff = call(client, "GET", "/api/v1/hosts/lab/revisions/1/diff/3/", token).json()
    rows = {r["key"]: r for s in diff["sections"] for r in s["rows"]}
    assert rows["max_model_len"]["old"] == "32768" and rows["max_model_len"]["new"] == "8192"


def test_actions_through_the_api_are_audited_as_api_and_pages_as_web(client, world, operator):
    response = call(client, "POST", "/api/v1/hosts/lab/revisions/", _token(operator), {"set": {}, "message": "api"})
    assert response.status_code == 201, response.content
    event = AuditEvent.objects.filter(action="revision.create").latest("pk")
    assert (event.actor, event.source, event.remote_addr) == (operator, "api", "127.0.0.1")
    page = Client()
    page.force_login(operator)
    assert page.post("/hosts/lab/revisions/3/comment/", {"body": "from the page"}).status_code in (200, 302)
    latest = AuditEvent.objects.filter(action="revision.comment").latest("pk")
    assert latest.source == "web"


@pytest.mark.parametrize(
    "method,path,body,field",
    [
        ("POST", "/api/v1/hosts/lab/switch/", {"revision": 99}, "revision"),
        ("POST", "/api/v1/hosts/lab/switch/", {"revision": "two"}, "revision"),
        ("POST", "/api/v1/hosts/lab/switch/", {}, "revision"),
        ("POST", "/api/v1/hosts/lab/switch/", "{not json", None),
        ("POST", "/api/v1/hosts/lab/switch/", [1, 2], None),
        ("POST", "/api/v1/hosts/lab/revisions/", {"set": {"max_model_len": 8192}}, "message"),
        ("POST", "/api/v1/hosts/lab/revisions/", {"set": {"max_model_len": 1e23}, "message": "m"}, "knobs"),
        ("POST", "/api/v1/hosts/lab/revisions/", {"set": {"no_such_knob": 1}, "message": "m"}, "no_such_knob"),
        ("POST", "/api/v1/hosts/lab/revisions/", {"env": {"LD_PRELOAD": "/tmp/x.so"}, "message": "m"}, "env"),
        ("POST", "/api/v1/hosts/lab/revisions/", {"model": "nope", "message": "m"}, "model"),
        ("POST", "/api/v1/hosts/lab/revisions/", {"parent": 42, "message": "m"}, "parent"),
        ("POST", "/api/v1/hosts/lab/benchmarks/", {"concurrency": [0]}, "profile"),
        ("POST", "/api/v1/hosts/lab/benchmarks/", {"profile": "no-such-profile"}, "profile"),
        ("POST", "/api/v1/hosts/lab/benchmarks/", {"concurrency": "1,2"}, "concurrency"),
    ],
)
def test_bad_input_is_a_400_with_field_errors_and_changes_nothing(client, world, operator, method, path, body, field):
    token = _token(operator)
    before = (DeploymentRevision.objects.count(), Operation.objects.count())
    response = call(client, method, path, token, body)
    assert response.status_code == 400, response.content
    data = response.json()
    assert data["detail"]
    if field:
        assert field in data["errors"], data
    assert (DeploymentRevision.objects.count(), Operation.objects.count()) == before


def test_a_revision_whose_engine_cannot_load_its_model_is_a_400_naming_the_field(client, world, operator):
    """r1 is vLLM serving a Hugging Face checkpoint: llama.cpp for it is refused on `engine`; from a
    llama.cpp revision of a GGUF, that checkpoint is refused on `model` (the body's name for it)."""
    token = _token(operator)
    gguf = ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL")
    make_revision(host=world["host"], engine="llama.cpp", model_variant=gguf, message="gguf", actor=operator)
    before = (DeploymentRevision.objects.count(), AuditEvent.objects.filter(action="revision.create").count())
    path = "/api/v1/hosts/lab/revisions/"
    response = call(client, "POST", path, token, {"parent": 1, "engine": "llama.cpp", "knobs": {}, "message": "m"})
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert list(errors) == ["engine"]
    assert "llama.cpp cannot load a Hugging Face checkpoint" in errors["engine"][0]
    assert f"Choose an engine that loads {QWEN} (SGLang or vLLM), or another model." in errors["engine"][0]
    response = call(client, "POST", path, token, {"parent": 3, "model": QWEN, "message": "m"})
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == ["model"]
    assert response.json()["detail"].startswith("model: llama.cpp cannot load a Hugging Face checkpoint")
    after = (DeploymentRevision.objects.count(), AuditEvent.objects.filter(action="revision.create").count())
    assert after == before


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/hosts/nope/",
        "/api/v1/hosts/nope/revisions/",
        "/api/v1/hosts/lab/revisions/9/",
        "/api/v1/hosts/lab/revisions/1/diff/9/",
        "/api/v1/models/nope/",
        "/api/v1/benchmarks/999999/",
        "/api/v1/operations/not-a-uuid/",
        "/api/v1/operations/00000000-0000-0000-0000-000000000000/",
        "/api/v1/no-such-thing/",
    ],
)
def test_unknown_objects_are_404_in_json(client, world, viewer, path):
    response = call(client, "GET", path, _token(viewer))
    assert response.status_code == 404
    assert response.json()["detail"]


def test_planner_errors_refuse_a_switch_with_the_findings_and_only_an_admin_overrides(
    client, world, operator, admin_user
):
    host: Host = world["host"]
    bad = make_revision(
        host=host,
        engine="vllm",
        engine_version="0.17.0",
        model_variant=ModelVariant.objects.get(name=QWEN),
        knobs={**KNOBS, "tensor_parallel_size": 3},
        message="tp 3 on 2 gpus",
        actor=operator,
    )
    refused = call(client, "POST", "/api/v1/hosts/lab/switch/", _token(operator), {"revision": bad.number})
    assert refused.status_code == 409
    assert refused.json()["findings"] and all(f["severity"] == "error" for f in refused.json()["findings"])
    by_operator = call(
        client, "POST", "/api/v1/hosts/lab/switch/", _token(operator), {"revision": bad.number, "override_reason": "x"}
    )
    assert by_operator.status_code == 400 and "admin" in by_operator.json()["detail"]
    assert not Operation.objects.filter(kind="switch").exists()
    by_admin = call(
        client,
        "POST",
        "/api/v1/hosts/lab/switch/",
        _token(admin_user),
        {"revision": bad.number, "override_reason": "lab test"},
    )
    assert by_admin.status_code == 202


def test_a_token_is_stored_as_a_hash_acts_with_its_users_current_role_and_records_its_use(client, world, operator):
    new = token_create(user=operator, name="ci", actor=operator)
    stored = ApiToken.objects.get(pk=new.token.pk)
    assert new.secret.startswith("cpat_") and new.secret not in (stored.digest, stored.prefix)
    assert stored.last_used_at is None
    assert call(client, "GET", "/api/v1/hosts/", new.secret).status_code == 200
    stored.refresh_from_db()
    assert stored.last_used_at is not None
    operator.groups.clear()  # the role taken away takes the token with it (tests/api/test_token_lifecycle.py)
    operator = User.objects.get(pk=operator.pk)
    assert call(client, "GET", "/api/v1/hosts/", new.secret).status_code == 401
    assert call(client, "GET", "/api/v1/hosts/", new.secret[:-1] + "x").status_code == 401


def test_session_cookies_do_not_authenticate_the_api(client, world, operator):
    """A signed-in browser is not a script: no token, no API (and so no CSRF hole)."""
    client.force_login(operator)
    assert client.post("/api/v1/hosts/lab/switch/", {"revision": 2}, content_type="application/json").status_code == 401


def test_exports_are_the_files_the_pages_and_the_command_give(client, world, viewer):
    from typing import get_args

    from api.schemas import ExportTarget, ExportVia
    from deployments.services.exports import TARGETS, VIA, revision_export

    assert set(get_args(ExportTarget)) == set(TARGETS) and set(get_args(ExportVia)) == set(VIA)
    token = _token(viewer)
    revision = world["host"].revisions.get(number=2)
    for target in ("systemd", "start-script", "opencode", "hermes"):
        body = call(client, "GET", f"/api/v1/hosts/lab/revisions/2/exports/{target}/", token).json()
        made = revision_export(revision, target)
        assert (body["filename"], body["content"]) == (made.filename, made.content)
    unit = call(client, "GET", "/api/v1/hosts/lab/revisions/2/exports/systemd/", token).json()["content"]
    assert "/opt/venvs/vllm-0.17.0/bin/vllm" in unit and "--max-model-len 16384" in unit
    # A target that does not exist is a 400 naming the choices; one the revision cannot go to is a 409 saying why.
    bad = call(client, "GET", "/api/v1/hosts/lab/revisions/2/exports/kubernetes/", token)
    assert bad.status_code == 400 and "target" in bad.json()["errors"]


def test_the_host_list_names_running_benchmarks_in_a_fixed_number_of_queries(client: Any, viewer: User) -> None:
    """GET /api/v1/hosts/ with a benchmark running on every host: each host's operation names
    its run, and the queries do not grow with the hosts."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from deployments.models import BenchmarkRun, DeploymentRevision, ModelVariant, Operation
    from hardware.models import Host

    variant = ModelVariant.objects.create(name="bench-model", format="gguf", gguf_file="m.gguf")
    token = _token(viewer)

    def add_hosts(names: list[str]) -> None:
        for name in names:
            host = Host.objects.create(name=name, queue=f"host.{name}")
            revision = DeploymentRevision.objects.create(
                host=host, number=1, engine="llama.cpp", model_variant=variant, message="m"
            )
            op = Operation.objects.create(kind="benchmark", host=host, revision=revision, state="running")
            BenchmarkRun.objects.create(revision=revision, operation=op, profile_name="quick", engine="llama.cpp")

    counts = []
    call(client, "GET", "/api/v1/hosts/", token)  # the token's first use is recorded once
    for names in (["b-0", "b-1"], ["b-2", "b-3", "b-4", "b-5"]):
        add_hosts(names)
        with CaptureQueriesContext(connection) as queries:
            listed = call(client, "GET", "/api/v1/hosts/", token)
        assert listed.status_code == 200
        counts.append(len(queries.captured_queries))
    runs = {r.operation.host.name: r.pk for r in BenchmarkRun.objects.select_related("operation__host")}
    items = listed.json()["items"] if isinstance(listed.json(), dict) else listed.json()
    assert {h["name"]: h["operation"]["benchmark"] for h in items} == runs
    assert counts[0] == counts[1], counts


def test_proposing_a_tuning_runs_best_to_a_group_starts_a_rollout_of_its_knobs(client, world, operator):
    from rollouts.models import Rollout

    run = world["tuning"]
    path = f"/api/v1/tuning/{run.pk}/propose/"
    body = call(client, "POST", path, _token(operator), {"group": "fleet"}).json()
    rollout = Rollout.objects.get(pk=body["rollout"])
    assert body["operation"] is None and body["change_request"] is None
    assert rollout.group == "fleet" and rollout.change["set"] == {"max_model_len": 16384}
    refused = call(client, "POST", path, _token(operator), {"group": "no-such-group"})
    assert refused.status_code == 400 and Rollout.objects.filter(group="no-such-group").count() == 0
