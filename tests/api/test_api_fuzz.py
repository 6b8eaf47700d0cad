"""Property fuzz of the API's bodies (hypothesis): any JSON, and the known fields with hostile
values, sent to every endpoint that takes a body. Never a 500, always a JSON answer, and a
refusal (4xx) changes nothing: no revision, operation or benchmark run appears."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.tokens import token_create
from deployments.models import BenchmarkRun, DeploymentRevision, Operation
from rollouts.models import Rollout
from tests.api.test_api import world  # noqa: F401 - the fixture: host "lab" with r1 active and r2
from tuning.models import TuningRun

# "{tuning}": the world's finished tuning run (its best beat the base; a group takes a rollout).
BODY_ENDPOINTS = [
    "hosts/lab/revisions/",
    "hosts/lab/switch/",
    "hosts/lab/benchmarks/",
    "hosts/lab/tuning/",
    "tuning/{tuning}/propose/",
]
FIELDS = {
    "hosts/lab/revisions/": ["parent", "engine", "model", "knobs", "set", "env", "port", "served_name", "message"],
    "hosts/lab/switch/": ["revision", "override_reason", "gate"],
    "hosts/lab/benchmarks/": ["profile", "concurrency", "input_tokens", "output_tokens", "requests", "slos"],
    "hosts/lab/tuning/": ["space", "engines", "base", "objective", "level", "limits", "profile", "max_trials", "seed"],
    "tuning/{tuning}/propose/": ["trial", "anyway", "review", "group", "batch_size"],
}
TOKENS: dict[int, str] = {}
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["\x00", "\ud800", "1e309", "NaN", "../../etc/passwd", "x" * 5000, "{{ 7*7 }}"]),
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
)


def _dumps(value: Any) -> str:
    # Non-finite floats and lone surrogates as a careless client would send them.
    return json.dumps(value, allow_nan=True, ensure_ascii=True)


@settings(
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_any_body_is_answered_in_json_and_a_refusal_changes_nothing(client, world, operator, data):  # noqa: F811
    endpoint = data.draw(st.sampled_from(BODY_ENDPOINTS))
    body = data.draw(
        st.one_of(
            json_values,
            st.dictionaries(st.sampled_from(FIELDS[endpoint]), json_values, max_size=4),
        )
    )
    if operator.pk not in TOKENS:  # one token for the whole test (a user may hold 20)
        TOKENS[operator.pk] = token_create(user=operator, name="fuzz", actor=operator).secret
    token = TOKENS[operator.pk]
    before = _counts()
    response = client.post(
        f"/api/v1/{endpoint.format(tuning=world['tuning'].pk)}",
        data=_dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code < 500, (endpoint, body, response.content[:300])
    assert response.status_code not in (401, 403), "the operator's token must get past sign-in, or nothing is tested"
    assert response["Content-Type"].startswith("application/json")
    if response.status_code >= 400:
        assert response.json()["detail"]
        assert _counts() == before, (endpoint, body)


def _counts() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (DeploymentRevision, Operation, BenchmarkRun, Rollout, TuningRun))


# The front door's bodies (issue 27): a served revision's mode, an alias, an inference key; and
# the team's (issues 28, 30): a change request, a scheduled change, a rollout, a host's tags.
DOOR_ENDPOINTS = {
    ("put", "hosts/lab/serving/2/"): ["mode", "idle_ttl_s"],
    ("put", "hosts/lab/aliases/coder/"): ["revision"],
    ("post", "keys/"): ["name", "models"],
    ("post", "changes/"): ["host", "kind", "revision", "name", "mode", "idle_ttl_s", "override_reason", "at", "window"],
    ("post", "schedules/"): ["kind", "host", "revision", "name", "override_reason", "at", "window"],
    ("post", "rollouts/"): [
        "group",
        "kind",
        "set",
        "set_env",
        "model",
        "message",
        "batch_size",
        "canary",
        "gate",
        "at",
        "window",
    ],
    ("put", "hosts/lab/tags/"): ["tags"],
}
DOOR_TOKENS: dict[int, str] = {}


def _door_rows() -> tuple[int, ...]:
    from changes.models import ChangeRequest
    from deployments.models import InferenceKey, ModelAlias, ServedRevision
    from hardware.models import HostTag
    from rollouts.models import Rollout
    from schedules.models import ScheduledChange

    models = (ServedRevision, ModelAlias, InferenceKey, ChangeRequest, ScheduledChange, Rollout, HostTag)
    return tuple(model.objects.count() for model in models) + (DeploymentRevision.objects.count(),)


@settings(
    database=None,
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_any_front_door_body_is_answered_in_json_and_a_refusal_changes_nothing(client, world, admin_user, data):  # noqa: F811
    method, endpoint = data.draw(st.sampled_from(sorted(DOOR_ENDPOINTS)))
    body = data.draw(
        st.one_of(
            json_values, st.dictionaries(st.sampled_from(DOOR_ENDPOINTS[method, endpoint]), json_values, max_size=3)
        )
    )
    if admin_user.pk not in DOOR_TOKENS:  # one token for the whole test
        DOOR_TOKENS[admin_user.pk] = token_create(user=admin_user, name="fuzz", actor=admin_user).secret
    before = _door_rows()
    response = getattr(client, method)(
        f"/api/v1/{endpoint}",
        data=_dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {DOOR_TOKENS[admin_user.pk]}",
    )
    assert response.status_code < 500, (endpoint, body, response.content[:300])
    assert response.status_code not in (401, 403), "the admin's token must get past sign-in, or nothing is tested"
    assert response["Content-Type"].startswith("application/json")
    if response.status_code >= 400:
        assert response.json()["detail"]
        assert _door_rows() == before, (endpoint, body)
