"""Model catalog pages: import from a config.json upload or a GGUF path."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from core.models import AuditEvent
from deployments.models import ModelVariant

pytestmark = pytest.mark.django_db

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
URL = "/models/import/"


def test_url_name():
    assert reverse("deployments:model_import") == URL


def test_import_page_has_both_forms(client, catalog, operator):
    client.force_login(operator)
    page = client.get(URL).content.decode()
    assert 'name="hf-config"' in page and 'name="gguf-path"' in page
    assert 'enctype="multipart/form-data"' in page


def test_config_json_upload_creates_a_variant(client, catalog, operator):
    client.force_login(operator)
    upload = SimpleUploadedFile("config.json", (CONFIGS / "qwen3.6-35b-a3b-awq.json").read_bytes())
    response = client.post(
        URL,
        {"source": "hf", "hf-config": upload, "hf-name": "My MoE", "hf-repo_id": "me/moe", "hf-weights_gib": "20"},
    )
    assert response.status_code == 302 and response.url == reverse("deployments:model_list")
    variant = ModelVariant.objects.get(name="My MoE")
    assert variant.arch["num_experts"] == 256 and variant.repo_id == "me/moe"
    assert variant.weights_bytes == 20 * 1024**3
    assert AuditEvent.objects.filter(action="model.import", object_id=str(variant.pk)).exists()
    listing = client.get(reverse("deployments:model_list")).content.decode()
    assert "My MoE" in listing and "Imported My MoE into the catalog, for chat (instruction-tuned)" in listing


def test_pasted_config_works_too(client, catalog, operator):
    client.force_login(operator)
    text = (CONFIGS / "gemma3-270m.json").read_text()
    response = client.post(URL, {"source": "hf", "hf-config_text": text, "hf-name": "Gemma tiny"})
    assert response.status_code == 302
    assert ModelVariant.objects.filter(name="Gemma tiny").exists()


@pytest.mark.parametrize(
    ("data", "field", "text"),
    [
        ({"hf-config_text": "{oops", "hf-name": "x"}, "config", "not valid JSON"),
        ({"hf-config_text": "", "hf-name": "x"}, "config", "Upload a config.json"),
        ({"hf-config_text": '{"a": 1}', "hf-name": "x"}, "config", "lacks num_hidden_layers"),
        ({"hf-config_text": "{}", "hf-name": ""}, "name", "required"),
        ({"hf-config_text": '{"num_hidden_layers": 2, "num_attention_heads": 2}', "hf-name": "Qwen3.5-27B"}, "name",
         "already has"),
    ],
)  # fmt: skip
def test_bad_config_import_shows_the_error_beside_the_field(client, catalog, operator, data, field, text):
    client.force_login(operator)
    before = ModelVariant.objects.count()
    response = client.post(URL, {"source": "hf", **data})
    assert response.status_code == 200
    form = response.context["hf_form"]
    assert text in " ".join(form.errors[field])
    assert ModelVariant.objects.count() == before


def test_gguf_path_import(client, catalog, operator):
    from tests.support.llama import gemma_package_path

    client.force_login(operator)
    response = client.post(URL, {"source": "gguf", "gguf-path": gemma_package_path(), "gguf-name": "gemma tiny gguf"})
    assert response.status_code == 302
    variant = ModelVariant.objects.get(name="gemma tiny gguf")
    assert variant.format == "gguf" and variant.quantization == "Q4_K_M"
    # Its header names the model with no fine-tune and no chat template: the base model, for completions,
    # and the page says so.
    assert variant.purpose == "completions" and "no fine-tune (general.finetune)" in variant.source
    listing = client.get(reverse("deployments:model_list")).content.decode()
    assert "Imported gemma tiny gguf into the catalog, for completions (base model)" in listing


def _purpose_cell(page: str, name: str) -> str:
    row = page[page.index(f'<td class="name">{name}') :]
    return row[row.index('<td class="purpose"') : row.index("</td>", row.index('<td class="purpose"'))]


def test_the_catalog_says_what_a_model_is_for_and_an_operator_changes_it(client, catalog, operator):
    variant = ModelVariant.objects.create(name="base-ish", format="gguf", gguf_file="/m/base.gguf")
    url = reverse("deployments:model_purpose", args=[variant.pk])
    client.force_login(operator)
    cell = _purpose_cell(client.get(reverse("deployments:model_list")).content.decode(), "base-ish")
    assert f'action="{url}"' in cell and '<option value="chat" selected>Chat (instruction-tuned)</option>' in cell

    response = client.post(url, {"purpose": "completions"}, follow=True)

    variant.refresh_from_db()
    assert variant.purpose == "completions"
    page = response.content.decode()
    assert "base-ish is for completions (base model)." in page
    assert '<option value="completions" selected>' in _purpose_cell(page, "base-ish")
    event = AuditEvent.objects.get(action="model.purpose", object_id=str(variant.pk))
    assert event.data == {"purpose": "completions", "was": "chat"}


def test_a_purpose_the_panel_does_not_know_is_refused_and_changes_nothing(client, catalog, operator):
    variant = ModelVariant.objects.create(name="tuned", format="gguf", gguf_file="/m/tuned.gguf")
    client.force_login(operator)
    response = client.post(reverse("deployments:model_purpose", args=[variant.pk]), {"purpose": "poetry"}, follow=True)
    variant.refresh_from_db()
    assert variant.purpose == "chat" and not AuditEvent.objects.filter(action="model.purpose").exists()
    assert "tuned: Select a valid choice. poetry is not one of the available choices." in response.content.decode()


def test_a_viewer_sees_what_a_model_is_for_and_cannot_change_it(client, catalog, viewer):
    variant = ModelVariant.objects.create(name="read-only", format="gguf", gguf_file="/m/r.gguf", purpose="completions")
    client.force_login(viewer)
    cell = _purpose_cell(client.get(reverse("deployments:model_list")).content.decode(), "read-only")
    assert "Completions (base model)" in cell and "<form" not in cell
    assert client.post(reverse("deployments:model_purpose", args=[variant.pk]), {"purpose": "chat"}).status_code == 403
    variant.refresh_from_db()
    assert variant.purpose == "completions"


def test_bad_gguf_path_shows_the_error(client, catalog, operator):
    client.force_login(operator)
    before = ModelVariant.objects.count()
    response = client.post(URL, {"source": "gguf", "gguf-path": "/no/such/file.gguf"})
    assert response.status_code == 200
    assert "No file at" in " ".join(response.context["gguf_form"].errors["path"])
    assert "No file at /no/such/file.gguf" in response.content.decode()
    assert ModelVariant.objects.count() == before


def test_viewer_cannot_import(client, catalog, viewer):
    client.force_login(viewer)
    before = ModelVariant.objects.count()
    assert client.post(URL, {"source": "hf", "hf-config_text": "{}", "hf-name": "x"}).status_code == 403
    assert ModelVariant.objects.count() == before


def test_the_catalog_prints_parameter_counts_as_people_say_them(client, catalog, viewer):
    client.force_login(viewer)
    page = client.get(reverse("deployments:model_list")).content.decode()
    assert "35B / 3B" in page and "27B / 27B" in page  # a MoE's total and active, a dense model's
    assert "35000000000" not in page.replace('title="35000000000', "")  # the exact count only in a title
