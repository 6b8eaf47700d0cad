"""Import/export services and their management commands: Ansible group_vars <-> revisions,
config.json and GGUF headers -> model variants."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from core.models import AuditEvent
from deployments.models import DeploymentRevision, ModelVariant
from deployments.runtime_bridge import engine_config_for_revision
from deployments.services.imports import (
    model_variant_import_gguf,
    model_variant_import_hf_config,
    revision_export_ansible,
    revision_import_ansible,
)
from serving.ansible_vars import parse_group_vars
from serving.engines.registry import get_adapter
from tests.hardware.factories import HostFactory
from tests.serving.test_ansible_vars import flag_pairs

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ALL_YML = FIXTURES / "ansible" / "all.yml"
GROUP_VARS = ALL_YML.read_text()
# Ollama serving a name the catalog has as a Hugging Face checkpoint (Ollama pulls tags only)
OLLAMA_OF_A_CHECKPOINT = GROUP_VARS.replace("engine: vllm", "engine: ollama").replace("qwen3.8:27b", "Qwen3.5-27B")
EXPECTED = json.loads((FIXTURES / "ansible" / "expected_vllm_argv.json").read_text())


def _lab():
    """The seed's host: its HF cache (/opt/vllm/hf-cache) lies under a reported model folder,
    as the revision path policy requires for HF_HOME. Its agent binds engines on 0.0.0.0
    (CONTROLPANEL_ENGINE_BIND_HOST), as the seed's role does."""
    return HostFactory(name="lab", model_dirs=["/opt/vllm"], engine_state={"bind_host": "0.0.0.0"})


def _import(host, operator, **kwargs):
    values = {"text": GROUP_VARS, "message": "the lab's Ansible setup"}
    values.update(kwargs)
    return revision_import_ansible(host=host, actor=operator, **values)


def _argv_env(revision: DeploymentRevision):
    spec = get_adapter(revision.engine).launch_spec(engine_config_for_revision(revision, resolve_secrets=False))
    return spec.masked_argv(), spec.masked_env()


def test_import_creates_a_revision_keeping_unknown_variables(catalog, operator):
    host = _lab()
    result = _import(host, operator, tag="ansible")
    revision = result.revision
    assert revision.number == 1 and revision.tag == "ansible" and revision.author == operator
    assert revision.model_variant.name == "Qwen3.8-27B-W4A16-AWQ"  # the catalog's, by repo id
    assert result.created_model is None
    assert revision.port == 8001 and revision.served_name == "Qwen3.8-27B-W4A16-AWQ"
    assert revision.knobs["max_model_len"] == 262144 and revision.knobs["gpu_memory_utilization"] == 0.95
    assert result.unknown == ("vllm_min_version",)
    assert revision.extras["ansible"]["unknown"] == {"vllm_min_version": "0.17"}
    assert revision.extras["ansible"]["ignored_known"]["vllm_user"] == "{{ ansible_user }}"
    assert AuditEvent.objects.filter(action="revision.import", host=host).count() == 1
    assert AuditEvent.objects.filter(action="revision.create", host=host).count() == 1


def test_imported_revision_runs_the_seed_scripts_command_flag_for_flag(catalog, operator):
    """With the script's vLLM (before 0.13), argv and env match the hand-derived command exactly."""
    host = _lab()
    revision = _import(host, operator, engine_version="0.12.0").revision
    argv, env = _argv_env(revision)
    assert flag_pairs(argv) == flag_pairs(EXPECTED["argv"])
    assert env == EXPECTED["env"]


def test_on_the_vllm_the_role_installs_the_command_is_the_scripts(catalog, operator):
    """The role installs vllm>=0.17.0 (the newest release), which ignores VLLM_ATTENTION_BACKEND:
    the import records that version and runs what the role's vLLM runs."""
    host = _lab()
    revision = _import(host, operator).revision
    assert revision.engine_version == "0.33.0"
    argv, env = _argv_env(revision)
    assert flag_pairs(argv) == flag_pairs(EXPECTED["argv"])
    assert env == {k: v for k, v in EXPECTED["env"].items() if k != "VLLM_ATTENTION_BACKEND"}


def test_export_writes_back_what_the_import_kept(catalog, operator):
    host = _lab()
    revision = _import(host, operator).revision
    exported = revision_export_ansible(revision)
    assert list(exported.not_exported) == ["VLLM_ATTENTION_BACKEND"]  # the newest vLLM ignores it
    again = parse_group_vars(exported.text)
    original = parse_group_vars(GROUP_VARS)
    assert again.knobs == original.knobs
    assert again.env == original.env
    assert again.unknown == {"vllm_min_version": "0.17"}
    assert again.ignored_known == original.ignored_known
    assert again.port == 8001 and again.host == "0.0.0.0"


def test_an_unknown_model_gets_a_stub_variant_and_a_note(catalog, operator):
    host = _lab()
    text = GROUP_VARS.replace("philbert440/Qwen3.8-27B-W4A16-AWQ", "someone/Brand-New-7B")
    result = _import(host, operator, text=text)
    assert result.created_model.name == "Brand-New-7B"
    assert result.created_model.repo_id == "someone/Brand-New-7B"
    assert any("stub variant" in n for n in result.notes)
    assert AuditEvent.objects.filter(action="model.create").exists()


def test_secret_values_are_never_imported(catalog, operator):
    host = _lab()
    text = GROUP_VARS.replace('vllm_api_key: ""', 'vllm_api_key: "sk-live-123"')
    result = _import(host, operator, text=text)
    assert "sk-live-123" not in json.dumps(result.revision.extras)
    assert "sk-live-123" not in json.dumps(list(AuditEvent.objects.values_list("data", flat=True)))
    assert any("vllm_api_key" in n for n in result.notes)
    assert "sk-live-123" not in revision_export_ansible(result.revision).text


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"text": "- a\n- list\n"}, "text"),
        ({"text": "key: [unclosed"}, "text"),
        ({"text": "inference_engine: vllm\n"}, "text"),  # no model
        ({"message": " "}, "message"),
        ({"text": GROUP_VARS.replace("vllm_max_num_seqs: 4", "vllm_max_num_seqs: -4")}, "max_num_seqs"),
        ({"text": OLLAMA_OF_A_CHECKPOINT}, "engine"),
    ],
)
def test_bad_group_vars_are_refused_and_write_nothing(catalog, operator, kwargs, field):
    host = _lab()
    with pytest.raises(ValidationError) as exc:
        _import(host, operator, **kwargs)
    assert field in exc.value.message_dict
    if field == "engine":
        assert "Ollama cannot load a Hugging Face checkpoint" in exc.value.message_dict["engine"][0]
    assert not DeploymentRevision.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="revision").exists()


def test_export_of_an_engine_without_an_ansible_role_is_a_validation_error(catalog, operator):
    from tests.support.revisions import make_revision

    host = _lab()
    revision = make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL"),
        knobs={"ctx_size": 8192},
        message="gguf",
        actor=operator,
    )
    with pytest.raises(ValidationError):
        revision_export_ansible(revision)


# --- commands -----------------------------------------------------------------------------------


def test_import_ansible_command_prints_the_new_number(catalog, operator):
    _lab()
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "import_ansible", str(ALL_YML), "--host", "lab", "--message", "from Ansible", "--user", "otto", stdout=out,
        stderr=err,
    )  # fmt: skip
    assert out.getvalue().strip() == "1"
    assert "vllm_min_version" in err.getvalue()
    revision = DeploymentRevision.objects.get(host__name="lab", number=1)
    assert revision.author == operator
    assert AuditEvent.objects.get(action="revision.import").source == "cli"


def test_export_ansible_command_prints_the_yaml(catalog, operator):
    host = _lab()
    _import(host, operator)
    out = io.StringIO()
    call_command("export_ansible", "--host", "lab", "--revision", "1", stdout=out)
    text = out.getvalue()
    assert text.startswith("---\n")
    assert "vllm_model: philbert440/Qwen3.8-27B-W4A16-AWQ" in text
    assert "vllm_min_version: '0.17'" in text
    # default revision: the latest when none is active
    out2 = io.StringIO()
    call_command("export_ansible", "--host", "lab", stdout=out2)
    assert out2.getvalue() == text


def test_commands_refuse_bad_input(catalog, operator, tmp_path):
    _lab()
    bad = tmp_path / "bad.yml"
    bad.write_text("- not\n- a mapping\n")
    with pytest.raises(CommandError):
        call_command("import_ansible", str(bad), "--host", "lab", "--message", "x")
    with pytest.raises(CommandError):
        call_command("import_ansible", str(tmp_path / "missing.yml"), "--host", "lab", "--message", "x")
    with pytest.raises(CommandError):
        call_command("export_ansible", "--host", "lab", "--revision", "9")
    assert not DeploymentRevision.objects.exists()


# --- model variants -----------------------------------------------------------------------------


def test_hf_config_import_creates_a_variant(catalog, operator):
    text = (FIXTURES / "configs" / "qwen3.8-27b-w4a16.json").read_text()
    variant = model_variant_import_hf_config(
        text=text, name="Qwen3.8-27B test", repo_id="me/qwen", weights_bytes=10, actor=operator
    )
    assert variant.arch["num_layers"] == 64
    assert variant.arch["full_attention_layers"] == 16
    assert variant.format == "hf" and variant.repo_id == "me/qwen"
    assert AuditEvent.objects.get(action="model.import").object_id == str(variant.pk)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"text": "{not json"}, "config"),
        ({"text": "{}"}, "config"),
        ({"name": "Qwen3.5-27B"}, "name"),  # already in the catalog
        ({"name": " "}, "name"),
    ],
)
def test_hf_config_import_refuses_bad_input(catalog, operator, kwargs, field):
    values = {"text": (FIXTURES / "configs" / "qwen3.5-27b.json").read_text(), "name": "new one"}
    values.update(kwargs)
    before = ModelVariant.objects.count()
    with pytest.raises(ValidationError) as exc:
        model_variant_import_hf_config(actor=operator, **values)
    assert field in exc.value.message_dict
    assert ModelVariant.objects.count() == before


def test_gguf_import_reads_the_header(catalog, operator):
    from tests.support.llama import gemma_model_path

    variant = model_variant_import_gguf(path=gemma_model_path(), actor=operator)
    assert variant.format == "gguf" and variant.gguf_file == gemma_model_path()
    assert variant.arch["num_layers"] == 18
    assert variant.quantization == "Q4_K_M"
    assert variant.gguf_kv
    assert variant.weights_bytes > 100_000_000


@pytest.mark.parametrize("path", ["", "relative.gguf", "/nonexistent/model.gguf", "/etc/hostname"])
def test_gguf_import_refuses_bad_paths(catalog, operator, path):
    before = ModelVariant.objects.count()
    with pytest.raises(ValidationError) as exc:
        model_variant_import_gguf(path=path, actor=operator)
    assert "path" in exc.value.message_dict
    assert ModelVariant.objects.count() == before


def test_gguf_import_of_a_file_that_is_not_gguf(catalog, operator, tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValidationError) as exc:
        model_variant_import_gguf(path=str(fake), actor=operator)
    assert "path" in exc.value.message_dict
