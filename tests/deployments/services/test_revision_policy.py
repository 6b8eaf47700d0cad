"""Who may create a revision that reaches beyond serving, and how the panel shows it.

Operators serve models; code that runs on the host, and variables nobody vetted, need an
admin and are recorded. Files must lie under the host's model folders. Every refusal
stores nothing."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from core.models import AuditEvent
from deployments.models import DeploymentRevision, ModelVariant
from deployments.templatetags.revision_concerns import needs_admin, revision_concerns
from tests.hardware.factories import HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db


@pytest.fixture
def host(catalog):
    return HostFactory(name="lab", model_dirs=["/srv/models"])


@pytest.fixture
def awq(catalog):
    return ModelVariant.objects.create(name="Qwen3-8B-AWQ", repo_id="Qwen/Qwen3-8B-AWQ")


def vllm(host, actor, model, **kwargs):
    values = {"engine": "vllm", "model_variant": model, "message": "serve it", "knobs": {"max_model_len": 32768}}
    values.update(kwargs)
    return make_revision(host=host, actor=actor, **values)


def llama(host, actor, path, **kwargs):
    model = ModelVariant.objects.create(name=f"m-{ModelVariant.objects.count()}", format="gguf", gguf_file=path)
    values = {"engine": "llama.cpp", "model_variant": model, "message": "serve it", "knobs": {"ctx_size": 4096}}
    values.update(kwargs)
    return make_revision(host=host, actor=actor, **values)


@pytest.mark.parametrize(
    ("knobs", "env", "field"),
    [
        ({"trust_remote_code": True}, {}, "trust_remote_code"),
        ({"hf_overrides": {"auto_map": {"AutoConfig": "evil/repo--m.C"}}}, {}, "hf_overrides"),
        ({"speculative_config": {"method": "eagle3", "model": "someone/draft"}}, {}, "speculative_config"),
        ({}, {"HF_ENDPOINT": "https://evil.example"}, "env"),
        ({}, {"SOME_NEW_VLLM_SWITCH": "1"}, "env"),
    ],
)
def test_an_operator_cannot_create_what_only_an_admin_may(host, awq, operator, knobs, env, field):
    with pytest.raises(ValidationError) as exc:
        vllm(host, operator, awq, knobs={"max_model_len": 32768, **knobs}, env=env)
    assert field in exc.value.message_dict
    assert "only an admin" in " ".join(exc.value.message_dict[field])
    assert not DeploymentRevision.objects.exists()


def test_an_admin_may_and_the_audit_records_what_was_accepted(host, awq, admin_user):
    revision = vllm(host, admin_user, awq, knobs={"trust_remote_code": True}, env={"HF_ENDPOINT": "https://hf.lan"})
    event = AuditEvent.objects.get(action="revision.create", object_id=str(revision.pk))
    kinds = {(c["field"], c["kind"]) for c in event.data["concerns"]}
    assert kinds == {("trust_remote_code", "code"), ("env.HF_ENDPOINT", "privileged")}
    assert event.actor == admin_user
    assert needs_admin(revision_concerns(revision))


@pytest.mark.parametrize(
    ("path", "knobs", "env", "field", "words"),
    [
        ("/srv/models/q.gguf", {"mmproj": "/etc/passwd"}, {}, "mmproj", "outside lab's model folders"),
        ("/srv/models/q.gguf", {"chat_template_file": "/srv/models/../../etc/shadow"}, {}, "chat_template_file", ".."),
        ("/var/lib/panel/db.sqlite3", {}, {}, "model_variant", "outside"),
        ("/srv/models/q.gguf", {}, {"LLAMA_ARG_STATIC_PATH": "/"}, "env", "not allowed"),
        ("/srv/models/q.gguf", {}, {"LD_PRELOAD": "/srv/models/x.so"}, "env", "not allowed"),
    ],
)
def test_files_outside_the_model_folders_are_refused_even_for_admins(host, admin_user, path, knobs, env, field, words):
    with pytest.raises(ValidationError) as exc:
        llama(host, admin_user, path, knobs={"ctx_size": 4096, **knobs}, env=env)
    assert words in " ".join(exc.value.message_dict[field])
    assert not DeploymentRevision.objects.exists()


def test_a_host_without_model_folders_opens_no_absolute_path(catalog, operator):
    bare = HostFactory(name="declared", model_dirs=[])
    with pytest.raises(ValidationError) as exc:
        llama(bare, operator, "/srv/models/q.gguf")
    assert "no model folders" in str(exc.value)
    # A bare file name is read inside the folder the host's agent configures; the host checks it.
    assert llama(bare, operator, "q.gguf").number == 1


def test_files_inside_the_model_folders_are_an_operators_business(host, operator):
    revision = llama(host, operator, "/srv/models/q.gguf", knobs={"ctx_size": 4096, "mmproj": "/srv/models/mm.gguf"})
    assert [c.kind for c in revision_concerns(revision)] == ["path", "path"]
    assert not needs_admin(revision_concerns(revision))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"knobs": {"speculative_config": {"method": "mtp", "note": "\x00"}}}, "knobs"),
        ({"knobs": {"max_model_len": float("nan")}}, "knobs"),
        ({"env": {"CUDA_VISIBLE_DEVICES": "0\x00"}}, "env"),
        ({"message": "hello\x00world"}, "message"),
        ({"served_name": "a\x00b"}, "served_name"),
        ({"api_key_secret": "x\x00"}, "api_key_secret"),
        ({"port": "99999999999999999999"}, "port"),
        ({"port": 1.5}, "port"),
    ],
)
def test_values_postgresql_cannot_store_are_clear_errors(host, awq, operator, kwargs, field):
    with pytest.raises(ValidationError) as exc:
        vllm(host, operator, awq, **kwargs)
    assert field in exc.value.message_dict
    assert not DeploymentRevision.objects.exists()


def test_the_revision_diff_and_switch_pages_show_what_an_admin_approved(host, awq, admin_user, operator, client):
    plain = vllm(host, operator, awq, message="plain")
    risky = vllm(host, admin_user, awq, knobs={"trust_remote_code": True}, message="needs remote code")
    client.force_login(operator)
    for url in (
        reverse("deployments:revision_detail", args=[host.name, risky.number]),
        reverse("deployments:revision_diff", args=[host.name, plain.number, risky.number]),
        reverse("deployments:revision_switch", args=[host.name, risky.number]),
    ):
        page = client.get(url).content.decode()
        assert "runs code" in page and "admin-approved" in page, url
        assert "trust_remote_code runs Python code from the model repository" in page
    plain_page = client.get(reverse("deployments:revision_detail", args=[host.name, plain.number])).content.decode()
    assert "admin-approved" not in plain_page
