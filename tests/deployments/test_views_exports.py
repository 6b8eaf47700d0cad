"""Exports page (client configs, group_vars) and the Ansible import page."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from core.models import AuditEvent
from deployments.models import DeploymentRevision, ModelVariant
from deployments.services.imports import revision_import_ansible
from deployments.services.secrets import secret_set
from tests.deployments.test_views_revisions import GOOD_KNOBS, add_revision, make_lab
from tests.hardware.factories import HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

ALL_YML = Path(__file__).resolve().parents[1] / "fixtures" / "ansible" / "all.yml"


def test_exports_show_client_configs_with_served_name_and_real_context(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)
    page = client.get(reverse("deployments:revision_exports", args=["lab", 1])).content.decode()
    assert "opencode.json" in page and "config.yaml" in page and ".aider.model.settings.yml" in page
    assert "http://lab.lan:8001/v1" in page
    assert "&quot;qwen&quot;" in page  # served name in the JSON
    assert "context_length: 32768" in page  # Hermes gets the server's real context
    assert "EMPTY" in page  # no API key: the placeholder clients send
    assert "vllm_model: philbert440/Qwen3.8-27B-W4A16-AWQ" in page  # group_vars
    # Claude Code (Anthropic's Messages: the root URL) and Codex (a Responses provider)
    assert "&quot;ANTHROPIC_BASE_URL&quot;: &quot;http://lab.lan:8001&quot;" in page
    assert "wire_api = &quot;responses&quot;" in page and "model_context_window = 32768" in page


def test_a_completions_model_says_so_on_its_revision_and_its_exports_send_completions(
    client, catalog, operator, viewer
):
    """The catalog says the model is a base model, served on purpose for completions (serving.purpose)."""
    from deployments.services.catalog import model_variant_set_purpose

    _, r1 = make_lab(operator)
    model_variant_set_purpose(variant=r1.model_variant, purpose="completions", actor=operator)
    client.force_login(viewer)
    page = client.get(reverse("deployments:revision_detail", args=["lab", 1])).content.decode()
    assert "completions (base model)</span>" in page
    exports = html.unescape(client.get(reverse("deployments:revision_exports", args=["lab", 1])).content.decode())
    assert "curl -s http://lab.lan:8001/v1/completions" in exports and '"prompt": ' in exports
    assert "client.completions.create(" in exports
    assert "qwen is a completions model (a base model, as the catalog says): this client chats" in exports


def test_exports_never_show_a_secret(client, catalog, operator, admin_user, viewer):
    host, _ = make_lab(operator)
    secret_set(host=host, name="vllm-key", value="sk-secret-value-9", actor=admin_user)
    add_revision(host, operator, api_key_secret="vllm-key")
    client.force_login(viewer)
    page = client.get(reverse("deployments:revision_exports", args=["lab", 2])).content.decode()
    assert "sk-secret-value-9" not in page
    assert "LLM_API_KEY" in page


def test_group_vars_download(client, catalog, operator, viewer):
    host = HostFactory(name="lab", address="lab.lan", model_dirs=["/opt/vllm"])
    revision_import_ansible(host=host, text=ALL_YML.read_text(), message="import", actor=operator)
    client.force_login(viewer)
    response = client.get(reverse("deployments:revision_exports", args=["lab", 1]), {"download": "group_vars"})
    assert response["Content-Disposition"] == 'attachment; filename="lab-r1-all.yml"'
    text = response.content.decode()
    assert "vllm_min_version: '0.17'" in text and "open_webui_port: 8080" in text


def test_llama_cpp_has_no_group_vars_but_the_page_works(client, catalog, operator, viewer):
    host = HostFactory(name="lab", address="lab.lan", model_dirs=["/opt/vllm"])
    make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL"),
        knobs={"ctx_size": 65536, "parallel": 2, "kv_unified": False},
        message="gguf",
        actor=operator,
    )
    client.force_login(viewer)
    page = client.get(reverse("deployments:revision_exports", args=["lab", 1])).content.decode()
    assert "the Ansible roles run vllm or ollama" in page
    assert "32,768 tokens" in page  # per slot: ctx_size / parallel


def test_ansible_import_page_upload_creates_a_revision(client, catalog, operator):
    HostFactory(name="lab", address="lab.lan", model_dirs=["/opt/vllm"])
    client.force_login(operator)
    url = reverse("deployments:ansible_import", args=["lab"])
    assert "group_vars" in client.get(url).content.decode()
    upload = SimpleUploadedFile("all.yml", ALL_YML.read_bytes())
    response = client.post(url, {"file": upload, "message": "from the lab's repo", "tag": "ansible"}, follow=True)
    revision = DeploymentRevision.objects.get()
    assert response.redirect_chain[-1][0] == reverse("deployments:revision_detail", args=["lab", 1])
    page = response.content.decode()
    assert "vllm_min_version" in page  # listed as not understood
    assert revision.extras["ansible"]["unknown"] == {"vllm_min_version": "0.17"}
    assert revision.tag == "ansible" and revision.author == operator
    assert AuditEvent.objects.filter(action="revision.import").count() == 1


def test_ansible_import_paste(client, catalog, operator):
    HostFactory(name="lab", address="lab.lan", model_dirs=["/opt/vllm"])
    client.force_login(operator)
    response = client.post(
        reverse("deployments:ansible_import", args=["lab"]),
        {"text": ALL_YML.read_text(), "message": "pasted", "engine_version": "0.12.0"},
    )
    assert response.status_code == 302
    assert DeploymentRevision.objects.get().engine_version == "0.12.0"


@pytest.mark.parametrize(
    ("data", "field", "text"),
    [
        ({"text": "- a list\n", "message": "m"}, "text", "Not a group_vars file"),
        ({"text": "", "message": "m"}, "file", "Upload a group_vars file"),
        ({"text": "x: 1\n", "message": ""}, "message", "required"),
        ({"text": ALL_YML.read_text().replace("vllm_max_num_seqs: 4", "vllm_max_num_seqs: 0"),
          "message": "m"}, "text", "max_num_seqs: max_num_seqs must be at least 1"),
    ],
)  # fmt: skip
def test_ansible_import_errors_beside_the_field(client, catalog, operator, data, field, text):
    HostFactory(name="lab", address="lab.lan", model_dirs=["/opt/vllm"])
    client.force_login(operator)
    response = client.post(reverse("deployments:ansible_import", args=["lab"]), data)
    assert response.status_code == 200
    assert field in response.context["form"].errors
    assert text in " ".join(response.context["form"].errors[field])
    assert not DeploymentRevision.objects.exists()


def test_viewer_cannot_import(client, catalog, viewer):
    HostFactory(name="lab", address="lab.lan", model_dirs=["/opt/vllm"])
    client.force_login(viewer)
    response = client.post(reverse("deployments:ansible_import", args=["lab"]), {"text": "x: 1", "message": "m"})
    assert response.status_code == 403
    assert not DeploymentRevision.objects.exists()


def test_exports_json_is_valid(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)
    response = client.get(reverse("deployments:revision_exports", args=["lab", 1]))
    opencode = next(c for c in response.context["clients"] if c["key"] == "opencode")
    config = json.loads(opencode["content"])
    assert config["model"] == "selfhosted/qwen"
    assert config["provider"]["selfhosted"]["models"]["qwen"]["limit"]["context"] == 32768


def test_exports_page_shows_the_host_launch_or_why_not(client, catalog, operator, viewer):
    from hardware.models import Host

    make_lab(operator)  # the host recorded installing vLLM 0.17.0 into /opt/venvs/vllm-0.17.0
    client.force_login(viewer)
    url = reverse("deployments:revision_exports", args=["lab", 1])
    page = client.get(url).content.decode()
    assert "ExecStart=/opt/venvs/vllm-0.17.0/bin/vllm serve philbert440/Qwen3.8-27B-W4A16-AWQ" in page
    assert "exec /opt/venvs/vllm-0.17.0/bin/vllm serve" in page
    Host.objects.filter(name="lab").update(engine_installs={})
    page = client.get(url).content.decode()
    assert "Not exported: no vllm 0.17.0 install is recorded on lab" in page  # never a bare `vllm` unit
    assert "ExecStart=" not in page


def test_every_export_has_a_copy_button_and_downloads_as_its_own_file(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)
    url = reverse("deployments:revision_exports", args=["lab", 1])
    page = client.get(url).content.decode()
    assert '<script src="/static/js/exports.js" defer></script>' in page
    targets = re.findall(r'<button type="button" class="secondary" data-copy="([\w-]+)">Copy</button>', page)
    keys = re.findall(r'href="\?download=([\w-]+)"', page)
    assert {"opencode", "claude-code", "codex", "start-script", "systemd", "group_vars"} <= set(keys), keys
    assert len(targets) == len(keys) and all(f'id="{t}"' in page for t in targets), targets
    for key in keys:
        response = client.get(url, {"download": key})
        assert response.status_code == 200, key
        disposition = response["Content-Disposition"]
        assert re.fullmatch(r'attachment; filename="[A-Za-z0-9._-]+"', disposition), disposition
        target = "group-vars" if key == "group_vars" else f"text-{key}"
        shown = re.search(rf'id="{target}">(.*?)</pre>', page, re.S)
        assert shown and html.unescape(shown.group(1)) == response.content.decode(), key
    opencode = client.get(url, {"download": "opencode"})
    assert opencode["Content-Disposition"] == 'attachment; filename="opencode.json"'
    assert json.loads(opencode.content)["provider"]
    assert client.get(url, {"download": "nope"}).status_code == 404


def test_hermes_export_of_a_32k_revision_warns_that_hermes_refuses_it(client, catalog, operator, viewer):
    """Hermes Agent 0.19.0 will not start with a model under 64,000 tokens: the revision's exports
    page and `manage.py export` say so before anyone tries; a 64K revision gets no warning."""
    import io

    from django.core.management import call_command

    host, _ = make_lab(operator)  # r1 serves 32,768 tokens
    add_revision(host, operator, knobs={**GOOD_KNOBS, "max_model_len": 65536})
    client.force_login(viewer)
    warning = "Hermes Agent refuses any model with a context under 64,000 tokens"
    page = html.unescape(client.get(reverse("deployments:revision_exports", args=["lab", 1])).content.decode())
    hermes = page.split('id="client-hermes"', 1)[1].split("</section>", 1)[0]
    assert warning in hermes and "this revision serves 32,768 per request" in hermes
    assert f"# WARNING: {warning}" in hermes  # in the downloaded file too
    assert warning not in page.split('id="client-hermes"', 1)[0]  # opencode runs with 32K: no warning there
    out, err = io.StringIO(), io.StringIO()
    call_command("export", "--host", "lab", "--revision", "1", "--to", "hermes", stdout=out, stderr=err)
    assert warning in err.getvalue() and "context_length: 32768" in out.getvalue()

    page = html.unescape(client.get(reverse("deployments:revision_exports", args=["lab", 2])).content.decode())
    assert "context_length: 65536" in page and warning not in page
    err = io.StringIO()
    call_command("export", "--host", "lab", "--revision", "2", "--to", "hermes", stdout=io.StringIO(), stderr=err)
    assert warning not in err.getvalue()
