"""Every field a user can submit × every role × hostile values (issue 11, "Proof").

`FORMS` lists every URL that accepts a POST, with the role it needs and a valid value for every
field its forms carry. `test_every_post_url_and_field_is_covered` fails when a URL starts taking
POSTs, or a page or form class grows a field, that `FORMS` does not list. The matrix then posts,
for every field, each hostile value (NUL, 5,000 characters, '²', '1e309', 'nan', '-1', nested
JSON, Jinja, a path escape, markup), the other fields valid:
- anonymous -> sent to the login page; a role too low -> 403, and no row changed;
- a role allowed -> never a 500, and a value with markup in it never comes back unescaped.
Failures are collected and reported together, so one run lists every broken field.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.auth.views import PasswordChangeView
from django.test import Client
from django.urls import Resolver404, get_resolver, resolve, reverse

from changes.forms import DecisionForm, HostReviewForm
from core.models import AuditEvent
from deployments.forms import (
    AliasForm,
    AnsibleImportForm,
    BenchmarkForm,
    CommentForm,
    DoorModeForm,
    GgufImportForm,
    HfConfigImportForm,
    HubImportForm,
    InferenceKeyForm,
    InferenceKeyModelsForm,
    ModelPurposeForm,
    PlaygroundForm,
    RevisionForm,
    SecretForm,
    SecretMarkForm,
    ServeModeForm,
    SwitchForm,
)
from deployments.models import DeploymentRevision, ModelVariant, Operation, RevisionComment
from deployments.views.hosts import InstallForm, ReadAgainForm
from notifications.forms import ChannelForm, RuleForm
from people.forms import PersonCreateForm, RoleForm
from rollouts.forms import HostTagsForm, RolloutForm
from schedules.forms import WhenForm, WindowForm
from tests.test_access import ACCESS, AGENT_API, CHANNEL, OPEN, ROLLOUT, RULE, TUNING, _names, token_api
from tests.test_access import world as access_world
from tuning.forms import PREFIX as TUNING_PREFIX
from tuning.forms import knob_specs as tuning_knobs

pytestmark = pytest.mark.django_db

HOSTILE = [
    "\x00",
    "a\x00b",
    "x" * 5000,
    "²",
    "1e309",
    "nan",
    "-1",
    '{"a": {"b": [1, {"c": NaN, "d": "\\u0000"}]}, "e": 1e999}',
    "{{ lookup('pipe','id') }}",
    "../../etc/passwd",
    '<script>alert("x")</script>',
]
# Extra values for the fields that carry NAME=VALUE lines (knobs reach JSON-typed knobs).
EXTRA = {
    "knobs": [
        'speculative_config={"model": "evil/repo", "num_speculative_tokens": NaN}',
        'hf_overrides={"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 1}}}}}}}}',
        "max_model_len=1e309",
        "max_model_len=" + "9" * 5000,
        "gpu_memory_utilization=nan",
        "trust_remote_code=true",
        'limit_mm_per_prompt={"image": 1e400}',
    ],
    "env": [
        "LD_PRELOAD=/tmp/x.so",
        "LLAMA_ARG_STATIC_PATH=/",
        "PATH=/tmp",
        "CUDA_VISIBLE_DEVICES=\x00",
        "A=" + "x" * 5000,
    ],
}
# Known bugs: (url name, field, value) left out of the matrix until fixed, each with a strict-xfail
# reproducer. None today (a 5,000-character user name at sign-in was one: django-axes stored it).
KNOWN_BUGS: set[tuple[str, str, str]] = set()
RANK = {"anonymous": 0, "viewer": 1, "operator": 2, "admin": 3}
# A notification rule: benchmark regressions on h1 to the world's channel, with a limit per metric.
NOTIFICATION_RULE = {
    "channel": "00000000-0000-0000-0000-0000000000c1",
    "host": "h1",
    "events": "benchmark.regressed",
    "enabled": "on",
    "threshold_decode_tok_s": "10",
    "threshold_output_tok_s": "",
    "threshold_requests_s": "",
    "threshold_ttft_p50": "20",
    "threshold_ttft_p99": "",
    "threshold_tpot_p50": "",
    "threshold_e2e_p90": "",
    "threshold_joules_per_token": "",
}

# url name -> (kwargs, POST role, {field: a valid value}); fields that take a file get text.
FORMS: dict[str, tuple[dict[str, Any], str, dict[str, str]]] = {
    "login": ({}, "anonymous", {"username": "nobody-here", "password": "wrong", "next": "/"}),
    "logout": ({}, "anonymous", {}),
    "password_change": ({}, "viewer", {"old_password": "pw-vera", "new_password1": "n3w-Pass!x", "new_password2": "x"}),
    "hardware:host_probe": ({"name": "h1"}, "operator", {}),
    "hardware:host_stop": ({"name": "h1"}, "operator", {}),
    "hardware:host_start": ({"name": "h1"}, "operator", {}),
    "hardware:host_install": (
        {"name": "h1"},
        "operator",
        {"engine": "ollama", "version": "", "wheelhouse": "", "source_dir": ""},
    ),
    "hardware:host_install_read_again": ({"name": "h1"}, "operator", {"engine": "vllm", "version": "0.32.0"}),
    "deployments:benchmark_new": (
        {"host": "h1"},
        "operator",
        {
            "profile": "quick",
            "concurrency": "1,2",
            "input_tokens": "128",
            "output_tokens": "16",
            "requests": "4",
            "ttft_slo_ms": "500",
            "tpot_slo_ms": "50",
            "e2e_slo_ms": "5000",
            "revision": "1",
        },
    ),
    "deployments:revision_comment": ({"host": "h1", "number": 1}, "viewer", {"body": "looks good"}),
    # The playground's message (the matrix's host serves nothing: refused with 409, never a 500).
    "deployments:revision_chat": (
        {"host": "h1", "number": 1},
        "operator",
        {"prompt": "hello", "system": "", "temperature": "0.7", "top_p": "0.9", "max_tokens": "16", "history": "[]"},
    ),
    "deployments:revision_new": ({"host": "h1"}, "operator", {}),  # filled in by _revision_fields
    "deployments:revision_preview": ({"host": "h1"}, "viewer", {}),  # the same form, no message needed
    # Now, or scheduled: at a time or in the host's next maintenance window (schedules.forms.WhenForm).
    "deployments:revision_switch": (
        {"host": "h1", "number": 1},
        "operator",
        {"override_reason": "", "gate_profile": "quick", "gate_limits": "decode=5,ttft_p95=10", "when": "", "at": ""},
    ),
    "deployments:ansible_import": (
        {"host": "h1"},
        "operator",
        {
            "file": "",
            "text": "vllm_model: Qwen/Qwen3-8B\nvllm_max_model_len: 4096\n",
            "engine_version": "",
            "tag": "",
            "message": "from Ansible",
            "record_model_dirs": "",
        },
    ),
    "deployments:operation_cancel": ({"pk": "00000000-0000-0000-0000-000000000001"}, "operator", {}),
    "deployments:model_import": (
        {},
        "operator",
        {
            "source": "hf",
            "hf-config": "",
            "hf-config_text": '{"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4}',
            "hf-name": "matrix-model",
            "hf-repo_id": "",
            "hf-family": "",
            "hf-generation": "",
            "hf-quantization": "",
            "hf-weights_gib": "",
            "hf-tool_call_parser": "",
            "hf-reasoning_parser": "",
            "gguf-path": "/nonexistent/x.gguf",
            "gguf-name": "",
            "gguf-family": "",
            "gguf-generation": "",
            "hub-repo_id": "",
            "hub-revision": "",
            "hub-file": "",
            "hub-name": "",
            "hub-token": "",
        },
    ),
    # A download to a host (the page's form, and the switch page's "download it first").
    "deployments:host_models": ({"host": "h1"}, "operator", {"model": "", "token_secret": ""}),
    "deployments:host_model_delete": ({"host": "h1", "pk": 1}, "operator", {}),
    # What a catalog model is for (operators; the Models table's selector).
    "deployments:model_purpose": ({"pk": 1}, "operator", {"purpose": "completions"}),
    "hardware:host_token": ({"name": "h1"}, "admin", {"action": "issue"}),
    # A host's address (admins; the one loopback rule: hardware.services.clean_host_address).
    "hardware:host_address": ({"name": "h1"}, "admin", {"address": "10.0.0.7"}),
    # A host secret (admins): set or rotate one; mark it as a hub token.
    "deployments:host_secrets": ({"host": "h1"}, "admin", {"name": "matrix-key", "value": "v", "hub_token": "on"}),
    "deployments:host_secret_mark": ({"host": "h1", "secret": "hf"}, "admin", {"hub_token": "on"}),
    # The front door: a revision's serving mode, aliases (operators); inference keys (admins).
    "deployments:host_serve_mode": ({"host": "h1"}, "operator", {"revision": "1", "mode": "off", "idle_ttl_s": ""}),
    "deployments:host_alias_set": (
        {"host": "h1"},
        "operator",
        {"name": "coder", "revision": "1", "when": "", "at": ""},
    ),
    "deployments:host_alias_delete": ({"host": "h1", "alias": "coder"}, "operator", {}),
    "deployments:key_list": ({}, "admin", {"name": "matrix-key", "models": ""}),
    "deployments:key_revoke": ({"name": "ci"}, "admin", {}),
    "deployments:key_models": ({"name": "ci"}, "admin", {"models": "coder"}),
    "deployments:key_mode": ({}, "admin", {"mode": "open"}),
    "people:add": ({}, "admin", {"username": "newbie", "email": "", "role": "viewer"}),
    "people:role": ({"username": "vera"}, "admin", {"role": "viewer"}),
    "people:active": ({"username": "vera"}, "admin", {"active": "1"}),
    "people:password": ({"username": "vera"}, "admin", {}),
    "people:unlock": ({"username": "vera"}, "admin", {}),
    "people:sso_groups": ({"username": "vera"}, "admin", {}),
    "notifications:channel_new": (
        {},
        "admin",
        {"name": "matrix", "url": "jsons://hooks.lab.example/panel", "enabled": "on"},
    ),
    "notifications:channel_edit": ({"pk": CHANNEL}, "admin", {"name": "ops", "url": "", "enabled": "on"}),
    "notifications:channel_delete": ({"pk": CHANNEL}, "admin", {}),
    "notifications:channel_test": ({"pk": CHANNEL}, "admin", {}),
    "notifications:rule_new": ({}, "admin", NOTIFICATION_RULE),
    "notifications:rule_edit": ({"pk": RULE}, "admin", NOTIFICATION_RULE),
    "notifications:rule_delete": ({"pk": RULE}, "admin", {}),
    # Scheduled changes: cancel one; a host's maintenance window (or remove it).
    "schedules:cancel": ({"pk": 1}, "operator", {}),
    "schedules:window": (
        {"host": "h1"},
        "operator",
        {"weekdays": "5", "start": "02:00", "end": "04:00", "timezone": "Europe/Berlin", "remove": ""},
    ),
    "api_tokens:new": ({}, "viewer", {"name": "ci job"}),
    "api_tokens:revoke": ({}, "viewer", {"token": "1"}),
    "changes:decide": ({"pk": 1}, "operator", {"verdict": "comment", "comment": "looks fine", "seen": ""}),
    "changes:host_review": ({"host": "h1"}, "admin", {"required": ""}),
    # Rollouts across hosts: start one over a group; pause, resume, cancel (the world's has ended).
    "rollouts:new": (
        {},
        "operator",
        {
            "group": "lab",
            "kind": "revision",
            "knobs": "threads=4",
            "env": "",
            "model": "",
            "message": "from the matrix",
            "alias": "",
            "tag": "",
            "batch_size": "1",
            "canary": "",
            "gate_profile": "",
            "gate_limits": "decode=5,ttft_p95=10",
            "when": "",  # now; or at a time, or in the canary's window (schedules.forms.WhenForm)
            "at": "",
        },
    ),
    "rollouts:pause": ({"pk": ROLLOUT}, "operator", {}),
    "rollouts:resume": ({"pk": ROLLOUT}, "operator", {}),
    "rollouts:cancel": ({"pk": ROLLOUT}, "operator", {}),
    "rollouts:host_tags": ({"name": "h1"}, "operator", {"tags": "lab, edge"}),
    # A tuning run of h1 from r1 (llama.cpp): every knob the form offers, one of them searched.
    "tuning:new": (
        {"name": "h1"},
        "operator",
        {
            "base": "1",
            "objective": "throughput",
            "level": "",
            "limits": "ttft_p95<=500",
            "profile": "quick",
            "concurrency": "1,2",
            "input_tokens": "128",
            "output_tokens": "16",
            "requests": "4",
            "max_trials": "8",
            "max_minutes": "60",
            "repeats": "3",
            "repeat_best": "2",
            **{TUNING_PREFIX + knob: "" for knob in tuning_knobs("llama.cpp")},
            TUNING_PREFIX + "parallel": "2,4",
        },
    ),
    "tuning:cancel": ({"pk": TUNING}, "operator", {}),
    "tuning:propose": ({"pk": TUNING}, "operator", {"group": "", "batch_size": "1"}),
}
# The form classes behind each URL (field names with their prefix): a field added to a class
# must be listed in FORMS even before a template shows it.
FORM_CLASSES: dict[str, list[tuple[Any, str]]] = {
    "password_change": [(PasswordChangeView.form_class, "")],
    "deployments:benchmark_new": [(BenchmarkForm, "")],
    "hardware:host_install": [(InstallForm, "")],
    "hardware:host_install_read_again": [(ReadAgainForm, "")],
    "deployments:revision_comment": [(CommentForm, "")],
    "deployments:revision_chat": [(PlaygroundForm, "")],
    "deployments:revision_new": [(RevisionForm, "")],
    "deployments:revision_preview": [(RevisionForm, "")],
    "deployments:revision_switch": [(SwitchForm, ""), (WhenForm, "")],
    "deployments:ansible_import": [(AnsibleImportForm, "")],
    "deployments:model_import": [(HfConfigImportForm, "hf-"), (GgufImportForm, "gguf-"), (HubImportForm, "hub-")],
    "deployments:model_purpose": [(ModelPurposeForm, "")],
    "people:add": [(PersonCreateForm, "")],
    "people:role": [(RoleForm, "")],
    "notifications:channel_new": [(ChannelForm, "")],
    "notifications:channel_edit": [(ChannelForm, "")],
    "notifications:rule_new": [(RuleForm, "")],
    "notifications:rule_edit": [(RuleForm, "")],
    "deployments:host_secrets": [(SecretForm, "")],
    "deployments:host_secret_mark": [(SecretMarkForm, "")],
    "deployments:host_serve_mode": [(ServeModeForm, "")],
    "deployments:host_alias_set": [(AliasForm, ""), (WhenForm, "")],
    "schedules:window": [(WindowForm, "")],
    "deployments:key_list": [(InferenceKeyForm, "")],
    "deployments:key_models": [(InferenceKeyModelsForm, "")],
    "deployments:key_mode": [(DoorModeForm, "")],
    "changes:decide": [(DecisionForm, "")],
    "changes:host_review": [(HostReviewForm, "")],
    "rollouts:new": [(RolloutForm, ""), (WhenForm, "")],
    "rollouts:host_tags": [(HostTagsForm, "")],
    # tuning:new's TuningForm: its knob fields are made per base engine and it drops four of
    # BenchmarkForm's, so the page (scanned below) is what lists its fields.
}
REVISION_FIELDS = {
    "engine": "vllm",
    "engine_version": "",
    "knobs": "max_model_len=4096",
    "env": "",
    "served_name": "",
    "port": "8000",
    "api_key_secret": "",
    "hf_token_secret": "",
    "tag": "",
    "message": "from the matrix",
    "parent": "",
}


def _fields(name: str) -> dict[str, str]:
    fields = dict(FORMS[name][2])
    if name in ("deployments:revision_new", "deployments:revision_preview"):
        variant = ModelVariant.objects.get(name="Qwen3-32B-AWQ")
        fields.update(REVISION_FIELDS, model_variant=str(variant.pk))
    return fields


class _Forms(HTMLParser):
    """Every POST form on a page: (action or hx-post, {field names})."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[list[str], set[str]]] = []
        self._open: tuple[list[str], set[str]] | None = None
        self._by_id: dict[str, tuple[list[str], set[str]]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form" and (a.get("method") or "get").lower() == "post":
            self._open = ([u for u in (a.get("action") or "", a.get("hx-post") or "") if u], set())
            self.forms.append(self._open)
            if a.get("id"):
                self._by_id[a["id"] or ""] = self._open
        elif tag != "form" and a.get("hx-post") and (a.get("hx-include") or "").startswith("#"):
            # an element that posts another form's fields (the live planner beside its form)
            included = self._by_id.get((a.get("hx-include") or "")[1:])
            if included is not None:
                included[0].append(a["hx-post"] or "")
        elif tag in ("input", "select", "textarea", "button") and self._open is not None and a.get("name"):
            self._open[1].add(a["name"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._open = None


def _clients(world_users: dict[str, User | None]) -> dict[str, Client]:
    clients = {}
    for role, user in world_users.items():
        client = Client(raise_request_exception=False)
        if user is not None:
            client.force_login(user)
        clients[role] = client
    return clients


def _counts() -> tuple[int, ...]:
    models = (DeploymentRevision, ModelVariant, AuditEvent, RevisionComment, Operation, User)
    return tuple(m.objects.count() for m in models)


world = access_world  # test_access's fixture: host h1 with r1, a finished operation, a benchmark


@pytest.fixture
def people(world, viewer, operator, admin_user):
    return {"anonymous": None, "viewer": viewer, "operator": operator, "admin": admin_user}


def test_every_post_url_and_field_is_covered(people):
    """A URL that takes POSTs, or a field on a form, that FORMS does not list fails here."""
    clients = _clients(people)
    # Which URLs take a POST: a viewer's empty POST is refused with 405 only by GET-only views.
    takes_post = {"login", "logout"}
    names = _names(get_resolver())
    for name in sorted(names - OPEN - set(AGENT_API) - token_api(names)):  # token APIs: test_agent_api, test_api
        kwargs = ACCESS[name][0]
        if clients["viewer"].post(reverse(name, kwargs=kwargs)).status_code != 405:
            takes_post.add(name)
    assert takes_post == set(FORMS), "POST URLs differ from FORMS"

    missing: list[str] = []
    for name, classes in FORM_CLASSES.items():
        for form_class, prefix in classes:
            for field in form_class.base_fields:
                if prefix + field not in _fields(name) and not (
                    name == "deployments:revision_new" and field == "model_variant"
                ):
                    missing.append(f"{name}: {prefix}{field} (form class)")
    # Every POST form on every page an admin can open (and the login page).
    pages = [reverse(n, kwargs=ACCESS[n][0]) for n in sorted(ACCESS) if ACCESS[n][1] in ("viewer", "admin")]
    seen: set[str] = set()
    for url in [*pages, reverse("login")]:
        client = Client() if url == reverse("login") else clients["admin"]
        response = client.get(url)
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            continue
        parser = _Forms()
        parser.feed(response.content.decode())
        for actions, names in parser.forms:
            targets = {resolve(a.split("?")[0]).view_name for a in actions if _resolves(a)} or {resolve(url).view_name}
            for target in targets:
                seen.add(target)
                known = set(_fields(target)) if target in FORMS else set()
                missing += [f"{target}: {n} (on {url})" for n in names - known - {"csrfmiddlewaretoken"}]
                if target not in FORMS:
                    missing.append(f"{target}: a POST form on {url} that FORMS does not list")
    assert not missing, "\n".join(missing)
    # Shown only while an engine runs / an operation runs / the person is locked out
    # (and Start: only on a host with an active revision, which the matrix's host has not).
    # (and the delete button of a model downloaded to a host: the matrix's host has none).
    # ... and the revoke button of an API token (the matrix's admin has none), and the mark
    # button of a host secret (the matrix's host has none), and the playground (its host serves nothing).
    assert set(FORMS) - seen <= {
        "deployments:host_secret_mark",
        "hardware:host_stop",
        "hardware:host_start",
        "deployments:operation_cancel",
        "people:unlock",
        "people:sso_groups",  # only for a person who signs in with SSO and whose role was set by hand
        "deployments:host_model_delete",
        "api_tokens:revoke",
        "deployments:revision_chat",
        "deployments:host_alias_delete",  # the front door's: shown only with an alias or a key
        "deployments:key_revoke",
        "deployments:key_models",
        "schedules:cancel",  # shown only beside a pending scheduled change
        "hardware:host_install_read_again",  # shown only beside a recorded pip install (the world's host has none)
        # a rollout's buttons: shown only while it is open (the world's has ended)
        "rollouts:pause",
        "rollouts:resume",
        "rollouts:cancel",
        # a tuning run's buttons: cancel while it runs, propose once it found a winner (the world's
        # run has ended with none)
        "tuning:cancel",
        "tuning:propose",
    }


def _resolves(url: str) -> bool:
    try:
        resolve(url.split("?")[0])
    except Resolver404:
        return False
    return True


def _unescaped(value: str, body: str) -> bool:
    return any(ch in value for ch in "<>\"'&") and value in body


def test_every_field_every_role_hostile_values(people):
    clients = _clients(people)
    failures: list[str] = []
    for name, (kwargs, post_role, _) in sorted(FORMS.items()):
        url = reverse(name, kwargs=kwargs)
        valid = _fields(name)
        for role in RANK:
            client = clients[role]
            if role == "anonymous" and post_role != "anonymous":
                # Refused before any field is read: one request per field, all values at once.
                for field in valid or [""]:
                    for value in HOSTILE if field else [""]:
                        response = client.post(url, {**valid, field: value} if field else {})
                        if response.status_code != 302 or not response.url.startswith("/accounts/login/"):
                            failures.append(f"{name} {field}={value[:20]!r} anonymous: {response.status_code}")
                continue
            if RANK[role] < RANK[post_role]:
                before = _counts()
                for field in valid or [""]:
                    for value in HOSTILE if field else [""]:
                        response = client.post(url, {**valid, field: value} if field else {})
                        if response.status_code != 403:
                            failures.append(f"{name} {field}={value[:20]!r} {role}: {response.status_code}, not 403")
                if _counts() != before:
                    failures.append(f"{name} {role}: a refused POST changed rows")
                continue
            if role != post_role and role != "admin":
                continue  # between the lowest allowed role and admin nothing new is checked
            for field in valid:
                for value in HOSTILE + EXTRA.get(field, []):
                    if (name, field, value) in KNOWN_BUGS:
                        continue
                    response = client.post(url, {**valid, field: value})
                    status = response.status_code
                    body = response.content.decode(errors="replace")
                    if status >= 500:
                        failures.append(f"{name} {field}={value[:40]!r} {role}: {status}")
                    elif _unescaped(value, body):
                        failures.append(f"{name} {field}={value[:40]!r} {role}: shown unescaped")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)


def test_long_user_name_at_sign_in_is_not_a_500(db):
    client = Client(raise_request_exception=False)
    response = client.post(reverse("login"), {"username": "x" * 5000, "password": "x"})
    assert response.status_code < 500
