"""Role enforcement on every URL: anonymous users are sent to the login page, viewers read
every page whose GET role is viewer, only admins read the admin pages (People), and only the
roles named here may POST. A new URL fails `test_every_url_is_listed` until it is added to
ACCESS with the roles it needs."""

from __future__ import annotations

import uuid

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from deployments.models import ModelVariant
from tests.hardware.factories import GPUFactory, HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

OP = "00000000-0000-0000-0000-000000000001"
BENCH_OP = "00000000-0000-0000-0000-000000000002"
HUB_IMPORT = "00000000-0000-0000-0000-0000000000b1"
CHANNEL = "00000000-0000-0000-0000-0000000000c1"
RULE = "00000000-0000-0000-0000-0000000000a1"
ROLLOUT = 900_001  # far above the ids the tests' own rollouts take from the sequence
TUNING = 900_001  # likewise for tuning runs
# name -> (kwargs, GET role, POST role or None when the URL takes no POST)
ACCESS: dict[str, tuple[dict, str, str | None]] = {
    "dashboard:index": ({}, "viewer", None),
    "dashboard:cards": ({}, "viewer", None),
    "hardware:host_detail": ({"name": "h1"}, "viewer", None),
    "hardware:host_card": ({"name": "h1"}, "viewer", None),
    "hardware:host_telemetry": ({"name": "h1"}, "viewer", None),
    "hardware:host_events": ({"name": "h1"}, "viewer", None),
    "hardware:host_probe": ({"name": "h1"}, "viewer", "operator"),
    "hardware:host_stop": ({"name": "h1"}, "viewer", "operator"),
    "hardware:host_start": ({"name": "h1"}, "viewer", "operator"),
    "hardware:host_install": ({"name": "h1"}, "viewer", "operator"),
    "hardware:host_install_read_again": ({"name": "h1"}, "viewer", "operator"),
    "hardware:host_token": ({"name": "h1"}, "admin", "admin"),
    "hardware:host_address": ({"name": "h1"}, "admin", "admin"),
    "hardware:operation_widget": ({"pk": OP}, "viewer", None),
    "deployments:benchmark_list": ({"host": "h1"}, "viewer", None),
    "deployments:benchmark_new": ({"host": "h1"}, "viewer", "operator"),
    "deployments:benchmark_progress": ({"pk": BENCH_OP}, "viewer", None),
    "deployments:benchmark_progress_status": ({"pk": BENCH_OP}, "viewer", None),
    "deployments:benchmark_detail": ({"pk": 1}, "viewer", None),
    "deployments:benchmark_export": ({"pk": 1}, "viewer", None),
    "deployments:benchmark_compare": ({"a": 1, "b": 1}, "viewer", None),
    "deployments:model_list": ({}, "viewer", None),
    "deployments:engine_log": ({"name": "h1"}, "viewer", None),
    "deployments:engine_log_follow": ({"name": "h1"}, "viewer", None),
    "deployments:audit_log": ({}, "viewer", None),
    "deployments:revision_list": ({"host": "h1"}, "viewer", None),
    "deployments:revision_detail": ({"host": "h1", "number": 1}, "viewer", None),
    "deployments:revision_comment": ({"host": "h1", "number": 1}, "viewer", "viewer"),
    "deployments:revision_chat": ({"host": "h1", "number": 1}, "viewer", "operator"),
    "deployments:operation_detail": ({"pk": OP}, "viewer", None),
    "deployments:operation_status": ({"pk": OP}, "viewer", None),
    "deployments:revision_new": ({"host": "h1"}, "viewer", "operator"),
    "deployments:revision_preview": ({"host": "h1"}, "viewer", "viewer"),
    "deployments:revision_switch": ({"host": "h1", "number": 1}, "viewer", "operator"),
    "deployments:revision_diff_pick": ({"host": "h1"}, "viewer", None),
    "deployments:revision_diff": ({"host": "h1", "a": 1, "b": 1}, "viewer", None),
    "deployments:revision_exports": ({"host": "h1", "number": 1}, "viewer", None),
    "deployments:ansible_import": ({"host": "h1"}, "viewer", "operator"),
    "deployments:operation_cancel": ({"pk": OP}, "viewer", "operator"),
    "deployments:model_import": ({}, "viewer", "operator"),
    "deployments:model_purpose": ({"pk": 1}, "viewer", "operator"),
    "deployments:hub_import": ({"pk": HUB_IMPORT}, "viewer", None),
    "deployments:hub_import_status": ({"pk": HUB_IMPORT}, "viewer", None),
    "deployments:host_models": ({"host": "h1"}, "viewer", "operator"),
    "deployments:host_secrets": ({"host": "h1"}, "admin", "admin"),
    "deployments:host_secret_mark": ({"host": "h1", "secret": "hf"}, "admin", "admin"),
    "deployments:host_model_delete": ({"host": "h1", "pk": 1}, "viewer", "operator"),
    "deployments:host_front_door": ({"host": "h1"}, "viewer", None),
    "deployments:host_serve_mode": ({"host": "h1"}, "viewer", "operator"),
    "deployments:host_alias_set": ({"host": "h1"}, "viewer", "operator"),
    "deployments:host_alias_delete": ({"host": "h1", "alias": "coder"}, "viewer", "operator"),
    "deployments:key_list": ({}, "admin", "admin"),
    "deployments:key_mode": ({}, "admin", "admin"),
    "deployments:key_revoke": ({"name": "ci"}, "admin", "admin"),
    "deployments:key_models": ({"name": "ci"}, "admin", "admin"),
    "deployments:usage": ({}, "viewer", None),
    "password_change": ({}, "viewer", "viewer"),
    "password_change_done": ({}, "viewer", None),
    "people:list": ({}, "admin", None),
    "people:add": ({}, "admin", "admin"),
    "people:detail": ({"username": "vera"}, "admin", None),
    "people:role": ({"username": "vera"}, "admin", "admin"),
    "people:active": ({"username": "vera"}, "admin", "admin"),
    "people:password": ({"username": "vera"}, "admin", "admin"),
    "people:unlock": ({"username": "vera"}, "admin", "admin"),
    "people:sso_groups": ({"username": "vera"}, "admin", "admin"),
    "notifications:index": ({}, "admin", None),
    "notifications:deliveries": ({}, "admin", None),
    "notifications:channel_new": ({}, "admin", "admin"),
    "notifications:channel_edit": ({"pk": CHANNEL}, "admin", "admin"),
    "notifications:channel_delete": ({"pk": CHANNEL}, "admin", "admin"),
    "notifications:channel_test": ({"pk": CHANNEL}, "admin", "admin"),
    "notifications:rule_new": ({}, "admin", "admin"),
    "notifications:rule_edit": ({"pk": RULE}, "admin", "admin"),
    "notifications:rule_delete": ({"pk": RULE}, "admin", "admin"),
    "schedules:list": ({}, "viewer", None),
    "schedules:cancel": ({"pk": 1}, "viewer", "operator"),
    "schedules:window": ({"host": "h1"}, "viewer", "operator"),
    "api_tokens:list": ({}, "viewer", None),
    "api_tokens:new": ({}, "viewer", "viewer"),
    "api_tokens:revoke": ({}, "viewer", "viewer"),
    "changes:list": ({}, "viewer", None),
    "changes:detail": ({"pk": 1}, "viewer", None),
    "changes:decide": ({"pk": 1}, "viewer", "operator"),
    "changes:host_review": ({"host": "h1"}, "admin", "admin"),
    "rollouts:list": ({}, "viewer", None),
    "rollouts:new": ({}, "viewer", "operator"),
    "rollouts:detail": ({"pk": ROLLOUT}, "viewer", None),
    "rollouts:status": ({"pk": ROLLOUT}, "viewer", None),
    "rollouts:pause": ({"pk": ROLLOUT}, "viewer", "operator"),
    "rollouts:resume": ({"pk": ROLLOUT}, "viewer", "operator"),
    "rollouts:cancel": ({"pk": ROLLOUT}, "viewer", "operator"),
    "rollouts:host_tags": ({"name": "h1"}, "viewer", "operator"),
    "tuning:list": ({"name": "h1"}, "viewer", None),
    "tuning:new": ({"name": "h1"}, "viewer", "operator"),
    "tuning:detail": ({"pk": TUNING}, "viewer", None),
    "tuning:status": ({"pk": TUNING}, "viewer", None),
    "tuning:cancel": ({"pk": TUNING}, "viewer", "operator"),
    "tuning:propose": ({"pk": TUNING}, "viewer", "operator"),
}
# /metrics answers a bearer token or loopback, not a session (tests/deployments/test_panel_metrics.py).
# Single sign-on's start and callback are sign-in pages (tests/test_sso.py, tests/browser/test_sso_browser.py).
OPEN = {"login", "logout", "metrics", "sso_login", "sso_callback"}
# The agent API answers host tokens only (tests/test_agent_api.py checks what each token may do).
AGENT_API = {
    "agent_api:hello": {},
    "agent_api:register": {},
    "agent_api:probe": {},
    "agent_api:heartbeat": {},
    "agent_api:telemetry": {},
    "agent_api:event": {},
    "agent_api:engine_log": {},
    "agent_api:serving": {},
    "agent_api:serving_report": {},
    "agent_api:launch": {"revision_id": 1},
    "agent_api:operations": {},
    "agent_api:begin": {"op_id": OP},
    "agent_api:progress": {"op_id": OP},
    "agent_api:finish": {"op_id": OP},
}
POST_ONLY = {
    "api_tokens:new",
    "api_tokens:revoke",
    "deployments:revision_comment",
    "deployments:revision_chat",
    "hardware:host_probe",
    "hardware:host_stop",
    "hardware:host_start",
    "hardware:host_install",
    "hardware:host_install_read_again",
    "hardware:host_token",
    "hardware:host_address",
    "deployments:host_model_delete",
    "deployments:model_purpose",
    "deployments:host_secret_mark",
    "deployments:host_serve_mode",
    "deployments:host_alias_set",
    "deployments:host_alias_delete",
    "deployments:key_revoke",
    "deployments:key_mode",
    "deployments:key_models",
    "people:role",
    "people:active",
    "people:password",
    "people:unlock",
    "people:sso_groups",
    "notifications:channel_delete",
    "notifications:channel_test",
    "notifications:rule_delete",
    "changes:decide",
    "changes:host_review",
    "schedules:cancel",
    "rollouts:pause",
    "rollouts:resume",
    "rollouts:cancel",
    "rollouts:host_tags",
    "tuning:cancel",
    "tuning:propose",
}
VIEWER_PAGES = sorted(n for n, (_, get, _) in ACCESS.items() if get == "viewer")
ADMIN_PAGES = sorted(n for n, (_, get, _) in ACCESS.items() if get == "admin" and n not in POST_ONLY)
# Live widgets of a finished operation answer 286 so htmx stops polling.
STOPPED = {
    "deployments:operation_status",
    "hardware:operation_widget",
    "deployments:benchmark_progress_status",
    "deployments:hub_import_status",  # the world's import has ended
    "rollouts:status",  # the world's rollout has ended
    "tuning:status",  # the world's tuning run has ended
}


def _names(resolver: URLResolver, prefix: str = "") -> set[str]:
    names: set[str] = set()
    for p in resolver.url_patterns:
        if isinstance(p, URLResolver):
            if p.namespace == "admin":
                continue
            names |= _names(p, f"{prefix}{p.namespace}:" if p.namespace else prefix)
        elif isinstance(p, URLPattern) and p.name:
            names.add(prefix + p.name)
    return names


def token_api(names: set[str]) -> set[str]:
    """The automation API answers personal tokens, not sessions: tests/api/test_api.py checks every
    endpoint x role (and that every path of its OpenAPI document is in that table)."""
    return {n for n in names if n.startswith("api:")}


def test_every_url_is_listed():
    names = _names(get_resolver())
    assert names - OPEN - set(AGENT_API) - token_api(names) == set(ACCESS)
    assert {n for n in _names(get_resolver()) if n.startswith("agent_api:")} == set(AGENT_API)


@pytest.mark.parametrize("name", sorted(AGENT_API))
def test_the_agent_api_refuses_people_and_strangers(client, world, admin_user, name):
    """No host token, no answer: not for anonymous requests, not for a signed-in admin."""
    url = reverse(name, kwargs=AGENT_API[name])
    for who in (None, admin_user):
        if who is not None:
            client.force_login(who)
        for method in ("get", "post"):
            response = getattr(client, method)(url)
            assert response.status_code == 401 and "WWW-Authenticate" in response, (method, who)


@pytest.fixture
def world(catalog, operator):
    host = HostFactory(name="h1", last_heartbeat=timezone.now())  # online: its page offers every action
    GPUFactory(host=host, index=0)
    make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL"),
        knobs={"ctx_size": 4096},
        message="first",
        actor=operator,
    )
    from deployments.models import Operation

    Operation.objects.create(id=uuid.UUID(OP), kind="probe", host=host, exclusive=False, state="succeeded")
    from deployments.models import BenchmarkRun

    revision = host.revisions.get(number=1)
    Operation.objects.create(id=uuid.UUID(BENCH_OP), kind="benchmark", host=host, revision=revision, state="failed")
    BenchmarkRun.objects.create(id=1, revision=revision, profile_name="q", profile={"name": "q"}, engine="llama.cpp")
    from deployments.models import HubImport

    HubImport.objects.create(
        id=uuid.UUID(HUB_IMPORT), repo_id="Qwen/Qwen3-32B-AWQ", state="failed", errors={"repo_id": ["x"]}
    )
    from notifications.models import Channel, Rule
    from notifications.secrets import url_encrypt

    channel = Channel.objects.create(
        id=uuid.UUID(CHANNEL),
        name="ops",
        scheme="json",
        service="JSON",
        url_ciphertext=url_encrypt("json://127.0.0.1:9/"),
    )
    Rule.objects.create(id=uuid.UUID(RULE), channel=channel, host=host, events=["switch.failed"])
    from changes.models import ChangeRequest

    # A request of operator's to switch h1 to r1 (h1 itself does not require review).
    ChangeRequest.objects.create(
        id=1, host=host, kind="switch", params={"revision": 1}, summary="Switch h1 to r1", author=operator
    )
    # Its id is given: the next request a page opens (a matrix POST protects h1) takes the one after.
    from django.core.management.color import no_style
    from django.db import connection

    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), [ChangeRequest]):
            cursor.execute(sql)
    from rollouts.models import Rollout

    Rollout.objects.create(id=ROLLOUT, group="lab", kind="revision", change={"set": {"threads": 4}}, state="succeeded")
    from tuning.models import TuningRun, TuningTrial

    # A finished tuning run of h1 from r1 whose base was measured once.
    tuned = TuningRun.objects.create(
        id=TUNING,
        host=host,
        base=revision,
        space={"parallel": [2, 4]},
        objective={"metric": "throughput", "level": "concurrency 4"},
        state="succeeded",
        stage="done",
        reason="no candidate met the limits",
    )
    figures = {"concurrency 4": {"throughput": 50.0, "ttft_p95": 300.0}, "run": {"j_per_token": None}}
    TuningTrial.objects.create(
        run=tuned,
        number=0,
        revision=revision,
        state="measured",
        rounds=[{"figures": figures, "value": 50.0}],
        value=50.0,
    )
    return host


@pytest.mark.parametrize("name", sorted(ACCESS))
def test_anonymous_is_sent_to_login(client, world, name):
    kwargs, _, post_role = ACCESS[name]
    url = reverse(name, kwargs=kwargs)
    for method in ("get", "post") if post_role else ("get",):
        response = getattr(client, method)(url)
        assert response.status_code == 302
        assert response.url.startswith("/accounts/login/")


@pytest.mark.parametrize("name", VIEWER_PAGES)
def test_viewer_reads_every_page(client, world, viewer, name):
    kwargs, get_role, _ = ACCESS[name]
    client.force_login(viewer)
    response = client.get(reverse(name, kwargs=kwargs))
    if name in POST_ONLY:
        assert response.status_code == 405
    else:
        # A finished operation's status partial answers 286 so htmx stops polling.
        assert response.status_code == (286 if name in STOPPED else 200), name
    # Issue 37: nothing a signed-in person is shown stays in a browser's or a proxy's cache.
    assert "no-store" in response.get("Cache-Control", ""), name


@pytest.mark.parametrize("name", sorted(n for n, (_, _, post) in ACCESS.items() if post and post != "viewer"))
def test_viewer_cannot_post(client, world, viewer, name):
    kwargs, _, _ = ACCESS[name]
    client.force_login(viewer)
    assert client.post(reverse(name, kwargs=kwargs)).status_code == 403


@pytest.mark.parametrize("name", ADMIN_PAGES)
def test_admin_pages_are_for_admins_only(client, world, viewer, operator, admin_user, name):
    kwargs, _, _ = ACCESS[name]
    url = reverse(name, kwargs=kwargs)
    for someone in (viewer, operator):
        client.force_login(someone)
        assert client.get(url).status_code == 403, (name, someone.username)
    client.force_login(admin_user)
    response = client.get(url)
    assert response.status_code == 200 and "no-store" in response.get("Cache-Control", ""), name


@pytest.mark.parametrize("name", sorted(n for n, (_, _, post) in ACCESS.items() if post == "admin"))
def test_operator_cannot_post_to_admin_urls(client, world, operator, name):
    kwargs, _, _ = ACCESS[name]
    client.force_login(operator)
    assert client.post(reverse(name, kwargs=kwargs)).status_code == 403


def test_user_without_role_is_refused(client, world, django_user_model):
    nobody = django_user_model.objects.create_user("nobody", password="x")
    client.force_login(nobody)
    assert client.get(reverse("dashboard:index")).status_code == 403


def test_login_page_and_signed_in_dashboard(client, world, viewer):
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b"Sign in" in page.content
    response = client.post("/accounts/login/", {"username": "vera", "password": "pw-vera"}, follow=True)
    assert b"h1" in response.content
    assert b"Hosts" in response.content
