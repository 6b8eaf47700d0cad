"""The front door in the panel (issue 27): the document a host's agent polls (contents, ETag and
304, secrets to their own host only), reports stored idempotently, refusals that change nothing,
keys' allowed models, aliases that follow a switch, the pages and the commands."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from core.models import AuditEvent
from deployments.host_serving import revision_launch
from deployments.models import FrontDoor, InferenceKey, ModelAlias, ModelVariant, ServedRevision, UsageDay
from deployments.services.aliases import alias_set
from deployments.services.inference_keys import key_create, key_revoke
from deployments.services.revisions import revision_mark_active
from deployments.services.secrets import secret_set
from deployments.services.serving_set import serving_mode_set
from hardware.credentials import host_token_issue
from hostagent.door.tables import serving_set
from hostagent.frontdoor.keys import hash_key
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db
GiB = 1 << 30
KEY = "sk-engine-alpha-0123456789"


class Agent:
    def __init__(self, token: str) -> None:
        self.client, self.auth = Client(), {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def serving(self, etag: str | None = None) -> Any:
        extra = {"HTTP_IF_NONE_MATCH": etag} if etag else {}
        return self.client.get("/agent/v1/serving", **self.auth, **extra)

    def report(self, body: dict[str, Any]) -> Any:
        return self.client.post(
            "/agent/v1/serving/report", data=json.dumps(body), content_type="application/json", **self.auth
        )


@pytest.fixture
def world(db: Any, admin_user: User, operator: User) -> dict[str, Any]:
    """A CPU-only host with 8 GiB of RAM, r1 (active, with an engine key), r2 and r3 (GGUFs of
    2 GiB on other ports) and r4 (5 GiB: two of those pinned cannot fit)."""
    host, token = host_token_issue(name="alpha", actor=admin_user)
    host.ram_bytes, host.model_dirs = 8 * GiB, ["/models"]
    host.save()
    secret_set(host=host, name="api-key", value=KEY, actor=admin_user)
    small = ModelVariant.objects.create(
        name="tiny-gguf",
        format="gguf",
        gguf_file="/models/tiny.gguf",
        weights_bytes=2 * GiB,
        arch={"architecture": "gemma3", "num_layers": 18},
    )
    big = ModelVariant.objects.create(
        name="big-gguf",
        format="gguf",
        gguf_file="/models/big.gguf",
        weights_bytes=5 * GiB,
        arch={"architecture": "gemma3", "num_layers": 18},
    )

    def rev(port: int, variant: ModelVariant = small, **fields: Any) -> Any:
        return make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=variant,
            served_name="tiny",
            port=port,
            knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0},
            message=f"on {port}",
            actor=operator,
            **fields,
        )

    r1 = rev(8001, api_key_secret="api-key")
    revision_mark_active(revision=r1, actor=operator)
    r2, r3, r4 = rev(8002), rev(8003), rev(8004, big)
    other, other_token = host_token_issue(name="beta", actor=admin_user)
    return {"host": host, "agent": Agent(token), "r": {1: r1, 2: r2, 3: r3, 4: r4}, "beta": Agent(other_token)}


def _state() -> tuple[int, int, int, int]:
    return (
        ServedRevision.objects.count(),
        ModelAlias.objects.count(),
        AuditEvent.objects.count(),
        UsageDay.objects.count(),
    )


def test_the_document_lists_the_active_revision_pinned_and_the_set_with_launches_and_keys(world, operator, admin_user):
    r = world["r"]
    serving_mode_set(revision=r[2], mode="on-demand", idle_ttl_s=600, actor=operator)
    alias_set(host=world["host"], name="coder", revision=r[1], actor=operator)
    alias_set(host=world["host"], name="fast", revision=r[2], actor=operator)
    key, secret = key_create(name="aider-alice", models="coder", actor=admin_user)
    response = world["agent"].serving()
    assert response.status_code == 200
    doc = response.json()
    assert response["ETag"].strip('"') == doc["version"]
    first, second = doc["models"]
    assert (first["name"], first["mode"], first["aliases"]) == ("tiny-r1", "pinned", ["coder"])
    launch = first["launch"]  # each fact once: the port, the key, the memory, the name are the launch's
    assert launch == json.loads(json.dumps(revision_launch(r[1], host_bound=True).to_dict()))
    assert (launch["number"], launch["spec"]["port"], launch["served_name"]) == (1, 8001, "tiny")
    assert launch["api_key"] == KEY  # the engine's own key, to its own host
    assert launch["memory"]["devices"] == {"ram": 2 * GiB}  # the weights (the planner knows no KV cache here)
    assert not {"upstream", "upstream_model", "api_key", "memory", "revision"} & set(first)
    assert (second["name"], second["mode"], second["idle_ttl_s"], second["aliases"]) == (
        "tiny-r2",
        "on-demand",
        600.0,
        ["fast"],
    )
    assert doc["door"] == {"max_waiting": 256, "max_wait_s": 300.0, "drain_timeout_s": 120.0}
    assert doc["keys"] == {
        "mode": "keys_required",
        "keys": [{"name": "aider-alice", "sha256": hash_key(secret), "models": ["coder"]}],
    }
    # What the host's agent makes of it: the door's tables, upstream at its engine bind address.
    made = serving_set(doc, bind_host="127.0.0.1")
    table, keys = made.table, made.keys
    assert table.resolve("tiny-r1").upstream == "http://127.0.0.1:8001" and table.resolve("coder").api_key == KEY
    assert table.resolve("coder").upstream_model == "tiny" and table.resolve("coder").memory == {"ram": 2 * GiB}
    assert table.resolve("coder").name == "tiny-r1" and table.resolve("fast").name == "tiny-r2"
    found = keys.find({"Authorization": f"Bearer {secret}"})
    assert found.allows("coder", "tiny-r1") and not found.allows("fast", "tiny-r2")
    assert secret not in response.content.decode()
    # Another host gets neither this host's models nor its engine key.
    other = world["beta"].serving().json()
    assert other["models"] == [] and KEY not in json.dumps(other) and other["keys"] == doc["keys"]


def test_a_cpu_only_hosts_table_counts_each_engines_threads_as_cores(world, operator):
    """The door loads two CPU engines side by side only when their threads fit the host's cores
    (scheduler: cores as room): the panel's table says each one's threads, so a host the panel
    feeds is held to it, not only a hand-written table."""
    host, r = world["host"], world["r"]
    host.cpu_cores = 8
    host.save()
    two = make_revision(
        host=host, engine="llama.cpp", model_variant=r[2].model_variant, served_name="tiny", port=8005,
        knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0, "threads": 2}, message="-t 2", actor=operator,
    )  # fmt: skip
    serving_mode_set(revision=two, mode="on-demand", idle_ttl_s=600, actor=operator)
    doc = world["agent"].serving().json()
    threads = {model["name"]: model.get("threads") for model in doc["models"]}
    # r1 leaves threads unset: llama.cpp then computes on every core, counted as the whole host's.
    assert threads == {"tiny-r1": 8, "tiny-r5": 2}
    agents = serving_set(doc, bind_host="127.0.0.1").table  # the table the host's agent gives its door
    assert {model.name: model.threads for model in agents.models} == threads

    # A GPU host's engines compute on its GPUs: their CPU threads are not the door's room.
    host.nvml_available = True
    host.save()
    assert all(model["threads"] is None for model in world["agent"].serving().json()["models"])


def test_etag_answers_304_until_something_changes(world, operator, admin_user):
    agent = world["agent"]
    version = agent.serving().json()["version"]
    for sent in (version, f'"{version}"', f'W/"{version}"'):
        again = agent.serving(sent)
        assert again.status_code == 304 and again.content == b"" and again["ETag"].strip('"') == version
    key, _ = key_create(name="ci", actor=admin_user)
    changed = agent.serving(version)
    assert changed.status_code == 200 and changed.json()["version"] != version
    key_revoke(key=key, actor=admin_user)
    after = agent.serving(changed.json()["version"])
    # Not back to the open document of before: the doors stay closed with no key left.
    assert after.status_code == 200 and after.json()["version"] != version
    assert after.json()["keys"] == {"mode": "keys_required", "keys": []}
    latest = after.json()["version"]
    serving_mode_set(revision=world["r"][3], mode="pinned", actor=operator)
    assert agent.serving(latest).status_code == 200


def _report(version: str = "v1", waiting: int = 3, requests: int = 10) -> dict[str, Any]:
    return {
        "version": version,
        "bind": "127.0.0.1:4000",
        "state": [
            {
                "name": "tiny-r1",
                "aliases": ["coder"],
                "mode": "pinned",
                "phase": "loaded",
                "in_flight": 2,
                "waiting": waiting,
                "idle_s": None,
                "last_load_s": 3.5,
                "memory": {"ram": 3 * GiB},
                "removed": False,
                "measured": {"ram": 2 * GiB},
            },
        ],
        "usage": [
            {
                "day": datetime.now(UTC).date().isoformat(),
                "key": "aider-alice",
                "model": "tiny-r1",
                "requests": requests,
                "prompt_tokens": 100,
                "completion_tokens": 50,
                "errors": 1,
            },
        ],
    }


def test_a_report_is_stored_and_sending_it_twice_or_an_older_one_changes_nothing(world, admin_user):
    key_create(name="aider-alice", actor=admin_user)
    agent = world["agent"]
    assert agent.report(_report(requests=10)).status_code == 204
    row = UsageDay.objects.get()
    assert (row.requests, row.prompt_tokens, row.completion_tokens, row.errors) == (10, 100, 50, 1)
    assert row.revision == world["r"][1] and row.host == world["host"]
    assert agent.report(_report(requests=10)).status_code == 204
    assert agent.report(_report(requests=7)).status_code == 204  # an older report resent from the outbox
    assert UsageDay.objects.get().requests == 10
    assert agent.report(_report(requests=12)).status_code == 204
    assert UsageDay.objects.get().requests == 12
    door = FrontDoor.objects.get(host=world["host"])
    assert door.bind == "127.0.0.1:4000" and door.state[0]["waiting"] == 3 and door.reported_at is not None


@pytest.mark.parametrize(
    "bad",
    [
        {"usage": [{"day": "2026-13-01", "key": "", "model": "m", "requests": 1}]},
        {"usage": [{"day": "1999-01-01", "key": "", "model": "m", "requests": 1}]},
        {"usage": [{"day": "2026-01-01", "key": "", "model": "m", "requests": -1}]},
        {"usage": [{"day": "2026-01-01", "key": "", "model": "m", "requests": 1.5}]},
        {"usage": [{"day": "2026-01-01", "key": "", "model": "m"}, {"day": "2026-01-01", "key": "", "model": "m"}]},
        {"state": [{"name": "m", "in_flight": "many"}]},
        {"state": [{"name": "m", "memory": {"gpu0": -5}}]},
        {"state": "nope"},
    ],
)
def test_a_bad_report_is_400_and_stores_nothing(world, bad):
    response = world["agent"].report({"version": "v", **bad})
    assert response.status_code == 400 and response.json()["error"]
    assert not UsageDay.objects.exists() and not FrontDoor.objects.exists()


def _usage_row(**changes: Any) -> dict[str, Any]:
    row = {"day": datetime.now(UTC).date().isoformat(), "key": "aider-alice", "model": "tiny-r1", "requests": 3}
    return {**row, "prompt_tokens": 30, "completion_tokens": 20, "errors": 0, **changes}


@pytest.mark.parametrize(
    ("hostile", "says"),
    [
        ({"key": "stranger"}, "keys the panel has no record of: 'stranger'"),
        ({"model": "gpt-4o"}, "models alpha does not serve: 'gpt-4o'"),
        ({"model": "tiny-r9"}, "models alpha does not serve"),  # no revision 9 on this host
        ({"model": "beta-model-r1"}, "models alpha does not serve"),  # r1 exists, named otherwise
        ({"completion_tokens": 10**15}, "usage[1].completion_tokens is out of range"),
        ({"prompt_tokens": 10**15}, "usage[1].prompt_tokens is out of range"),
        ({"requests": 10**10}, "usage[1].requests is out of range"),
        ({"completion_tokens": -1}, "usage[1].completion_tokens is out of range"),
        ({"requests": None}, "usage[1].requests must be a whole number"),
        ({"errors": 4}, "usage[1].errors (4) exceeds its requests (3)"),
    ],
)
def test_a_host_cannot_book_usage_to_a_stranger_key_another_model_or_absurd_counts(world, admin_user, hostile, says):
    """The attack: a GPU host (its own agent token) books usage to a key and a model of its
    choosing, or 10^15 tokens. One bad row refuses the whole report: nothing is booked, not even
    the good row beside it, nor the door's state."""
    key_create(name="aider-alice", actor=admin_user)
    report = _report()
    report["usage"] = [_usage_row(), _usage_row(**hostile, day="2026-01-02")]
    response = world["agent"].report(report)
    assert response.status_code == 400
    assert says in response.json()["error"]
    assert not UsageDay.objects.exists() and not FrontDoor.objects.exists()
    report["usage"] = [_usage_row()]  # the same report without the hostile row is booked
    assert world["agent"].report(report).status_code == 204
    assert UsageDay.objects.get().completion_tokens == 20


def test_usage_keeps_being_booked_for_a_revoked_key_and_a_model_that_left_the_set(world, admin_user, operator):
    """A door keeps a revoked key's and an unserved model's totals for 31 days and sends them in
    every report: they must not stall the host's reports."""
    key, _ = key_create(name="aider-alice", actor=admin_user)
    serving_mode_set(revision=world["r"][2], mode="on-demand", actor=operator)
    report = _report()
    report["usage"] = [_usage_row(), _usage_row(key="", model="tiny-r2"), _usage_row(model="tiny-r3")]
    assert world["agent"].report(report).status_code == 204  # r3 is a revision of this host, by its door name
    key_revoke(key=key, actor=admin_user)
    serving_mode_set(revision=world["r"][2], mode="off", actor=operator)
    report["usage"] = [_usage_row(requests=5), _usage_row(key="", model="tiny-r2", requests=4)]
    assert world["agent"].report(report).status_code == 204
    booked = dict(UsageDay.objects.values_list("model", "requests"))
    assert booked == {"tiny-r1": 5, "tiny-r2": 4, "tiny-r3": 3}


def test_refusals_change_nothing(world, operator, viewer):
    r, host = world["r"], world["host"]
    serving_mode_set(revision=r[2], mode="pinned", actor=operator)
    serving_mode_set(revision=r[4], mode="on-demand", actor=operator)
    alias_set(host=host, name="slow", revision=r[4], actor=operator)
    clash = make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=r[2].model_variant,
        served_name="tiny",
        port=8002,
        knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0},
        message="same port",
        actor=operator,
    )
    before, document = _state(), world["agent"].serving().json()
    refusals = [
        (serving_mode_set, dict(revision=r[1], mode="on-demand"), "active revision"),  # always pinned
        (serving_mode_set, dict(revision=r[3], mode="sometimes"), "pinned, on-demand or off"),
        (serving_mode_set, dict(revision=r[3], mode="on-demand", idle_ttl_s=0), "idle time"),
        (serving_mode_set, dict(revision=r[4], mode="pinned"), "do not fit"),  # 2 + 2 + 5 GiB past 8 GiB
        (serving_mode_set, dict(revision=clash, mode="on-demand"), "port 8002"),
        (serving_mode_set, dict(revision=r[4], mode="off"), "Move them first"),  # `slow` points at it
        (alias_set, dict(host=host, name="tiny-r2", revision=r[1]), "name of a served revision"),
        (alias_set, dict(host=host, name="fast", revision=r[3]), "does not serve r3"),
        (alias_set, dict(host=host, name="Bad Name", revision=r[1]), "lower-case"),
    ]
    for service, kwargs, why in refusals:
        with pytest.raises(ValidationError, match=why):
            service(actor=operator, **kwargs)
    with pytest.raises(PermissionDenied):
        alias_set(host=host, name="fast", revision=r[2], actor=viewer)
    assert _state() == before
    assert world["agent"].serving().json() == document


def test_a_switch_moves_the_aliases_of_the_revision_it_replaces(world, operator):
    r, host = world["r"], world["host"]
    serving_mode_set(revision=r[2], mode="on-demand", actor=operator)
    alias_set(host=host, name="coder", revision=r[1], actor=operator)
    alias_set(host=host, name="fast", revision=r[2], actor=operator)
    revision_mark_active(revision=r[3], actor=operator)
    assert dict(ModelAlias.objects.values_list("name", "revision__number")) == {"coder": 3, "fast": 2}
    assert AuditEvent.objects.filter(action="alias.follow").count() == 1
    doc = world["agent"].serving().json()
    assert [(m["name"], m["mode"], m["aliases"]) for m in doc["models"]] == [
        ("tiny-r3", "pinned", ["coder"]),
        ("tiny-r2", "on-demand", ["fast"]),
    ]


def test_changes_are_audited(world, operator, admin_user):
    serving_mode_set(revision=world["r"][2], mode="on-demand", idle_ttl_s=60, actor=operator)
    alias_set(host=world["host"], name="fast", revision=world["r"][2], actor=operator)
    alias_set(host=world["host"], name="fast", revision=world["r"][1], actor=operator)
    key_create(name="ci", actor=admin_user)
    actions = list(AuditEvent.objects.order_by("pk").values_list("action", flat=True))
    # The first key also requires keys from now on: that is in the log too.
    assert actions[-5:] == ["serving.mode", "alias.set", "alias.set", "keys.mode", "key.create"]
    assert "from r2 to r1" in AuditEvent.objects.filter(action="alias.set").order_by("pk").last().summary


def test_pages_show_the_loaded_set_the_aliases_keys_and_usage_totals(client, world, operator, admin_user):
    key_create(name="aider-alice", actor=admin_user)
    key_create(name="ci", actor=admin_user)
    serving_mode_set(revision=world["r"][2], mode="on-demand", actor=operator)
    alias_set(host=world["host"], name="coder", revision=world["r"][1], actor=operator)
    world["agent"].report(_report(waiting=4, requests=10))
    other = _report(waiting=4, requests=5)
    other["usage"][0].update(key="ci", model="tiny-r2", prompt_tokens=7, completion_tokens=3, errors=0)
    world["agent"].report(other)  # a new (day, key, model) beside the first
    client.force_login(operator)
    part = client.get("/hosts/alpha/front-door/").content.decode()
    assert "tiny-r1" in part and "tiny-r2" in part and "coder" in part and "4 waiting" in part
    assert part.count("2 GiB") == 3  # planned twice, measured once
    page = client.get("/hosts/alpha/").content.decode()
    assert 'id="front-door" hx-get="/hosts/alpha/front-door/"' in page  # loaded, then polled, on its own
    usage = client.get("/usage/?days=7").content.decode()
    assert "15 requests · 107 prompt tokens · 53 completion tokens · 1 errors" in usage
    by_key = usage.split('id="usage-by-key"')[1].split("</table>")[0]
    assert by_key.index("aider-alice") < by_key.index(">ci<")  # per key, the busiest first
    by_revision = usage.split('id="usage-by-revision"')[1].split("</table>")[0]
    assert 'href="/hosts/alpha/revisions/2/">tiny-r2</a>' in by_revision
    response = client.post("/hosts/alpha/front-door/aliases/", {"name": "fast", "revision": "2"})
    assert response.status_code == 302 and ModelAlias.objects.get(name="fast").revision == world["r"][2]
    response = client.post("/hosts/alpha/front-door/mode/", {"revision": "2", "mode": "pinned"})
    assert ServedRevision.objects.get(revision=world["r"][2]).mode == "pinned"
    client.force_login(admin_user)
    created = client.post("/keys/", {"name": "app-one", "models": "coder, fast"})
    body = created.content.decode()
    key = InferenceKey.objects.get(name="app-one")
    secret = body.split('id="new-key-secret">')[1].split("<")[0]
    assert hash_key(secret) == key.sha256 and key.allowed_models == ["coder", "fast"]
    assert secret not in client.get("/keys/").content.decode()  # shown once


def test_the_keys_page_shows_a_refused_key_on_its_form_and_makes_none(client, world, admin_user):
    client.force_login(admin_user)
    assert client.post("/keys/", {"name": "app-one", "models": ""}).status_code == 200
    again = client.post("/keys/", {"name": "app-one", "models": "coder"})
    body = again.content.decode()
    assert again.status_code == 200 and "exists already" in body and 'id="new-key-secret"' not in body
    assert InferenceKey.objects.filter(name="app-one").count() == 1
    assert InferenceKey.objects.get(name="app-one").allowed_models is None


def test_commands_key_and_alias(world, operator):
    out, err = io.StringIO(), io.StringIO()
    call_command("key", "create", "--name", "ci-bot", "--models", "coder,fast", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    assert secret.startswith("cpk_") and InferenceKey.objects.get(name="ci-bot").sha256 == hash_key(secret)
    listed = io.StringIO()
    call_command("key", "list", stdout=listed)
    assert "ci-bot" in listed.getvalue() and secret not in listed.getvalue()
    call_command("key", "revoke", "ci-bot", stdout=io.StringIO())
    assert InferenceKey.objects.get(name="ci-bot").revoked
    mode = io.StringIO()
    call_command("key", "mode", stdout=mode)
    assert mode.getvalue().strip() == "keys_required"  # the last key revoked: still closed
    with pytest.raises(CommandError, match="403|admin|permission|role"):
        call_command("key", "mode", "open", "--user", operator.username, stdout=io.StringIO())
    call_command("key", "mode", "open", stdout=mode)
    assert mode.getvalue().split() == ["keys_required", "open"]
    call_command("alias", "set", "--host", "alpha", "coder", "--revision", "1", stdout=io.StringIO())
    listed = io.StringIO()
    call_command("alias", "list", "--host", "alpha", stdout=listed)
    assert listed.getvalue().strip() == "coder\tr1"
    with pytest.raises(CommandError) as refused:
        call_command("alias", "set", "--host", "alpha", "fast", "--revision", "3", stdout=io.StringIO())
    assert refused.value.returncode == 2 and "does not serve r3" in str(refused.value)
    call_command("alias", "delete", "--host", "alpha", "coder", stdout=io.StringIO())
    assert not ModelAlias.objects.exists()
    made = io.StringIO()
    call_command(
        "revision", "create", "--host", "alpha", "--from", "2", "--port", "8009", "--message", "served too",
        "--serve", "on-demand", stdout=made,
    )  # fmt: skip
    entry = ServedRevision.objects.get(revision__number=int(made.getvalue().strip()))
    assert entry.mode == "on-demand" and entry.host == world["host"]


def test_one_day_written_two_ways_is_one_day_twice(world):
    """A day is a date, however it is written: today and today as an ISO week date (ten
    characters too, which Python's date.fromisoformat reads) are one (day, key, model) twice."""
    today = datetime.now(UTC).date()
    year, week, weekday = today.isocalendar()
    report = _report()
    report["usage"] = [_usage_row(key=""), _usage_row(key="", day=f"{year}-W{week:02d}-{weekday}")]
    response = world["agent"].report(report)
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "twice" in response.json()["error"]
    assert not UsageDay.objects.exists()
