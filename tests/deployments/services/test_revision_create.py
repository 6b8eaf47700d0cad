from __future__ import annotations

from dataclasses import replace

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from core.models import AuditEvent
from deployments.models import DeploymentRevision, ImmutableError, ModelVariant
from deployments.runtime_bridge import model_ref, revision_spec
from deployments.services.revisions import revision_create, revision_derive
from serving.engines.base import ModelRef
from serving.launch import derive
from tests.hardware.factories import HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db


def _create(host, actor, **kwargs):
    values = {
        "engine": "llama.cpp",
        "model_variant": ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL"),
        "knobs": {"ctx_size": 8192},
        "message": "serve the big MoE",
    }
    values.update(kwargs)
    return make_revision(host=host, actor=actor, **values)


def test_numbers_increase_per_host_and_link_parents(catalog, operator):
    a, b = HostFactory(), HostFactory()
    r1 = _create(a, operator)
    r2 = _create(a, operator, knobs={"ctx_size": 16384}, message="double the context")
    other = _create(b, operator)
    assert (r1.number, r2.number, other.number) == (1, 2, 1)
    assert r1.parent is None
    assert r2.parent == r1
    assert other.parent is None
    assert r2.author == operator
    assert AuditEvent.objects.filter(action="revision.create", host=a).count() == 2


def test_saving_an_existing_revision_raises_and_changes_nothing(catalog, operator):
    host = HostFactory()
    revision = _create(host, operator)
    revision.knobs = {"ctx_size": 1}
    with pytest.raises(ImmutableError):
        revision.save()
    with pytest.raises(ImmutableError):
        revision.delete()
    assert DeploymentRevision.objects.get(pk=revision.pk).knobs == {"ctx_size": 8192}


def test_from_parent_starts_a_branch(catalog, operator):
    host = HostFactory()
    r1 = _create(host, operator)
    _create(host, operator, message="second")
    r3 = _create(host, operator, parent=r1, message="back to the first settings, tweaked")
    assert r3.number == 3
    assert r3.parent == r1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"message": "  "}, "message"),
        ({"engine": "tgi"}, "engine"),
        ({"env": {"BAD NAME": "1"}}, "env"),
        ({"env": {"HF_TOKEN": "hf_abc"}}, "env"),
        ({"port": 70000}, "port"),
        ({"api_key_secret": "missing"}, "api_key_secret"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(catalog, operator, kwargs, field):
    host = HostFactory()
    with pytest.raises(ValidationError) as exc:
        _create(host, operator, **kwargs)
    assert field in exc.value.message_dict
    assert not DeploymentRevision.objects.exists()
    assert not AuditEvent.objects.filter(action="revision.create").exists()


def test_a_secret_value_in_env_never_reaches_the_database(catalog, operator):
    host = HostFactory()
    with pytest.raises(ValidationError):
        _create(host, operator, env={"HF_TOKEN": "hf_very_secret"})
    assert "hf_very_secret" not in str(list(AuditEvent.objects.values()))


def test_tags_are_unique_per_host(catalog, operator):
    a, b = HostFactory(), HostFactory()
    _create(a, operator, tag="daily-driver")
    _create(b, operator, tag="daily-driver")
    with pytest.raises(ValidationError):
        _create(a, operator, tag="daily-driver")


def test_viewer_cannot_create_revisions(catalog, viewer):
    with pytest.raises(PermissionDenied):
        _create(HostFactory(), viewer)
    assert not DeploymentRevision.objects.exists()


def test_the_spec_derive_builds_is_stored_as_given(catalog, operator):
    """revision_create takes derive()'s spec: what the revision stores, and launches, is that spec."""
    host = HostFactory(model_dirs=["/models"])
    variant = ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL")
    spec = derive(
        None,
        {
            "engine": "llama.cpp",
            "model": model_ref(variant),
            "knobs": {"ctx_size": 4096},
            "served_name": "big",
            "port": 0,
        },
    )
    revision = revision_create(host=host, spec=spec, message="from a spec", actor=operator)
    assert revision.model_variant == variant
    assert revision.port == 8080  # 0: the engine's default
    assert revision_spec(revision) == replace(spec, port=8080)


def test_a_spec_naming_no_catalog_model_is_refused(catalog, operator):
    host = HostFactory()
    spec = derive(None, {"engine": "llama.cpp", "model": ModelRef(name="not-in-the-catalog"), "port": 0})
    with pytest.raises(ValidationError) as exc:
        revision_create(host=host, spec=spec, message="m", actor=operator)
    assert "not-in-the-catalog" in exc.value.message_dict["model_variant"][0]
    assert not DeploymentRevision.objects.exists()


@pytest.mark.parametrize(
    ("engine", "model", "says"),
    [
        ("llama.cpp", "Qwen3.5-27B", "llama.cpp cannot load a Hugging Face checkpoint: the panel launches it with"),
        ("ollama", "Qwen3.5-122B-A10B-Q6_K_XL", "Ollama cannot load a GGUF file: the panel launches it with an Ollama"),
        ("ollama", "Qwen3.5-27B", "Ollama cannot load a Hugging Face checkpoint: the panel launches it with an Ollama"),
    ],
)
def test_an_engine_that_cannot_load_the_models_format_is_refused_and_nothing_is_stored(
    catalog, operator, engine, model, says
):
    host = HostFactory()
    with pytest.raises(ValidationError) as exc:
        _create(host, operator, engine=engine, model_variant=ModelVariant.objects.get(name=model), knobs={})
    said = exc.value.message_dict["engine"][0]
    assert says in said and f"Choose an engine that loads {model} (" in said and "or another model." in said
    assert not DeploymentRevision.objects.exists()
    assert not AuditEvent.objects.filter(action="revision.create").exists()


def test_deriving_names_what_was_changed_the_model_or_the_engine(catalog, operator):
    """From a llama.cpp revision of a GGUF: a Hugging Face model with the engine kept is refused
    beside the model; Ollama for the same GGUF beside the engine. Nothing is stored either way."""
    host = HostFactory()
    r1 = _create(host, operator)
    hf = ModelVariant.objects.get(name="Qwen3.5-27B")
    with pytest.raises(ValidationError) as exc:
        revision_derive(host=host, parent=r1, changes={"model": hf}, message="another model", actor=operator)
    assert list(exc.value.message_dict) == ["model_variant"]
    assert "llama.cpp cannot load a Hugging Face checkpoint" in exc.value.message_dict["model_variant"][0]
    with pytest.raises(ValidationError) as exc:
        revision_derive(
            host=host, parent=r1, changes={"engine": "ollama", "knobs": {}}, message="on Ollama", actor=operator
        )
    assert list(exc.value.message_dict) == ["engine"]
    assert "Ollama cannot load a GGUF file" in exc.value.message_dict["engine"][0]
    assert list(DeploymentRevision.objects.values_list("number", flat=True)) == [1]
    # the engine and the model changed together: a model SGLang loads is taken
    r2 = revision_derive(
        host=host, parent=r1, changes={"engine": "sglang", "knobs": {}, "model": hf}, message="both", actor=operator
    )
    assert (r2.engine, r2.model_variant) == ("sglang", hf)
