"""An operator cannot turn a revision into a way out of the engine, end to end: real agent
(Celery worker on the host's queue), real Redis and PostgreSQL, real llama-server.

Refusals by text happen in the service before anything is stored; a symlink that only the
host can see through is refused by the host before anything is stopped or started."""

from __future__ import annotations

import os
import uuid

import httpx
import pytest
from django.core.exceptions import ValidationError

from deployments.choices import OperationState
from deployments.models import DeploymentRevision, ModelVariant, active_revision_id_of
from deployments.services.switch import switch_request
from hardware.models import Host
from hostagent.local import supervisor_for
from tests.deployments.test_switch_celery import served_models
from tests.support.operations import wait_done

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(
    "env",
    [
        {"LLAMA_ARG_STATIC_PATH": "/"},  # llama-server would serve / over HTTP
        {"LD_PRELOAD": "/tmp/evil.so"},
        {"LD_LIBRARY_PATH": "/tmp"},
        {"PATH": "/tmp/evil-bin"},
        {"PYTHONPATH": "/tmp"},
    ],
)
def test_environment_that_serves_or_preloads_files_is_refused_before_it_is_stored(lab, operator, env):
    before = DeploymentRevision.objects.filter(host=lab["host"]).count()
    name = next(iter(env))
    with pytest.raises(ValidationError) as exc:
        _rev_with_env(lab, operator, env)
    assert name in str(exc.value) and "not allowed" in str(exc.value)
    assert DeploymentRevision.objects.filter(host=lab["host"]).count() == before
    assert not supervisor_for(lab["host"].name).status().running


def _rev_with_env(lab, operator, env):
    from tests.support.revisions import make_revision

    return make_revision(
        host=lab["host"],
        engine="llama.cpp",
        model_variant=lab["gemma"],
        served_name="gemma",
        port=lab["port"],
        knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0},
        env=env,
        message="try to escape",
        actor=operator,
    )


def test_a_projector_outside_the_model_folders_is_refused_by_the_service(lab, operator):
    with pytest.raises(ValidationError) as exc:
        lab["rev"]("read the panel's secret key", 2048, mmproj="/etc/passwd")
    assert "outside" in str(exc.value) and "/etc/passwd" in str(exc.value)


def test_a_symlink_out_of_the_model_folder_is_refused_by_the_host_and_the_engine_keeps_serving(lab, operator):
    good = lab["rev"]("gemma at 2k", 2048)
    first = wait_done(switch_request(revision=good, actor=operator))
    assert first.state == OperationState.SUCCEEDED, first.log + first.error
    pid = supervisor_for(lab["host"].name).status().pid

    # Inside the model folder by its name, outside it by where it leads: only the host sees that.
    link = lab["tmp"] / f"innocent-{uuid.uuid4().hex[:6]}.gguf"
    secret = lab["tmp"].parent / f"panel-secret-{uuid.uuid4().hex[:6]}"
    secret.write_text("the panel's secret key")
    os.symlink(secret, link)
    sneaky = ModelVariant.objects.create(name=f"sneaky-{uuid.uuid4().hex[:6]}", format="gguf", gguf_file=str(link))
    bad = lab["rev"]("a model that is really a link to a secret", 2048, model=sneaky)

    op = wait_done(switch_request(revision=bad, actor=operator))

    assert op.state == OperationState.FAILED
    assert op.result["refused"] is True and op.result["rolled_back"] is False
    assert "outside this host's model folders" in op.error and "not touched" in op.error
    status = supervisor_for(lab["host"].name).status()
    assert status.running and status.pid == pid, "the serving engine was never stopped"
    assert active_revision_id_of(Host.objects.get(pk=lab["host"].pk)) == good.pk
    assert served_models(lab["port"]) == ["gemma"]
    assert httpx.get(f"http://127.0.0.1:{lab['port']}/health", timeout=5).status_code == 200
