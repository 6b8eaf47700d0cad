"""Secrets: encrypted at rest, named by revisions, never shown; rotation is not a revision."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from core.models import AuditEvent
from core.secrets_mask import MASK
from deployments.models import DeploymentRevision, ModelVariant, Secret
from deployments.runtime_bridge import engine_config_for_revision
from deployments.services.secrets import secret_reveal
from serving.engines.registry import get_adapter
from tests.hardware.factories import HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db
VALUE = "sk-local-0123456789abcdef"


def test_a_secret_is_stored_encrypted_and_used_only_where_the_engine_runs(catalog, operator, monkeypatch):
    host = HostFactory(name="keyed")
    monkeypatch.setattr("sys.stdin", io.StringIO(VALUE + "\n"))
    call_command("secret", "set", "--host", "keyed", "vllm-key", stdout=io.StringIO())

    stored = Secret.objects.get(host=host, name="vllm-key")
    assert VALUE.encode() not in bytes(stored.ciphertext)
    assert secret_reveal(host=host, name="vllm-key") == VALUE

    revision = make_revision(
        host=host,
        engine="vllm",
        model_variant=ModelVariant.objects.get(name="Qwen3.5-27B"),
        api_key_secret="vllm-key",
        message="with an API key",
        actor=operator,
    )
    shown = get_adapter("vllm").launch_spec(engine_config_for_revision(revision))  # what pages render
    resolved = get_adapter("vllm").launch_spec(engine_config_for_revision(revision, resolve_secrets=True))
    assert resolved.env["VLLM_API_KEY"] == VALUE  # the host agent gets it...
    assert VALUE not in " ".join(resolved.masked_argv()) + str(resolved.masked_env())  # ...display never
    assert shown.env["VLLM_API_KEY"] == MASK  # pages show where it goes, never its value

    monkeypatch.setattr("sys.stdin", io.StringIO("sk-rotated\n"))
    call_command("secret", "set", "--host", "keyed", "vllm-key", stdout=io.StringIO())
    assert secret_reveal(host=host, name="vllm-key") == "sk-rotated"
    assert DeploymentRevision.objects.filter(host=host).count() == 1  # rotating is not a new revision
    assert not any(VALUE in str(e.data) + e.summary for e in AuditEvent.objects.all())

    out = io.StringIO()
    call_command("secret", "list", "--host", "keyed", stdout=out)
    assert "vllm-key" in out.getvalue() and "sk-" not in out.getvalue()


def test_an_empty_value_is_refused(catalog, monkeypatch):
    HostFactory(name="keyed")
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    with pytest.raises(CommandError) as exc:
        call_command("secret", "set", "--host", "keyed", "empty", stdout=io.StringIO())
    assert exc.value.returncode == 2
    assert not Secret.objects.exists()
