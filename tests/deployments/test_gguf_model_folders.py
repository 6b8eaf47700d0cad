"""A first model in a minute: the default model folder exists, the GGUF import takes a name inside
the model folders (and nothing outside them), the import page lists the GGUF files found there, and a
GGUF without a chat template is flagged on the catalog and the revision form.

The files are the real Gemma 270M GGUF's header (its first MiBs: the importer reads nothing else):
`gemma_package_path()` as the package ships it, which has no tokenizer.chat_template, and the suite's
copy with Gemma's template written in by gguf-py (`gemma_model_path()`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from deployments.models import ModelVariant
from deployments.services.exports import revision_export
from deployments.services.imports import model_variant_import_gguf
from tests.hardware.factories import HostFactory
from tests.support.llama import gemma_model_path, gemma_package_path
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

HEADER_BYTES = 16 * 1024 * 1024  # past the end of the header (vocabulary and tensor infos included)


def _header_copy(source: str, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as handle:
        target.write_bytes(handle.read(HEADER_BYTES))
    return target


@pytest.fixture
def folders(tmp_path, monkeypatch) -> tuple[Path, Path, Path]:
    """Two model folders (as CONTROLPANEL_MODEL_DIRS names them) and a folder outside them."""
    first, second, outside = tmp_path / "models", tmp_path / "more-models", tmp_path / "outside"
    _header_copy(gemma_package_path(), first / "gemma-plain.gguf")
    _header_copy(gemma_model_path(), second / "gemma" / "gemma-chat.gguf")
    _header_copy(gemma_package_path(), outside / "secret.gguf")
    (first / "escape.gguf").symlink_to(outside / "secret.gguf")
    (first / "notes.txt").write_text("not a model")
    monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", f"{first}:{second}")
    return first, second, outside


def test_a_bare_name_is_read_in_the_model_folders(catalog, operator, folders):
    first, second, _ = folders

    plain = model_variant_import_gguf(path="gemma-plain.gguf", name="plain", actor=operator)
    nested = model_variant_import_gguf(path="gemma/gemma-chat.gguf", name="chat", actor=operator)

    assert plain.gguf_file == str(first / "gemma-plain.gguf") and plain.arch["num_layers"] == 18
    assert nested.gguf_file == str(second / "gemma" / "gemma-chat.gguf")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("../outside/secret.gguf", "leads out of the model folders"),
        ("gemma/../../outside/secret.gguf", "leads out of the model folders"),
        ("escape.gguf", "outside this host's model folders"),  # a link in the folder to a file elsewhere
        ("missing.gguf", "No file named missing.gguf in the model folders"),
    ],
)
def test_names_that_leave_the_model_folders_are_refused(catalog, operator, folders, name, says):
    before = ModelVariant.objects.count()
    with pytest.raises(ValidationError) as caught:
        model_variant_import_gguf(path=name, actor=operator)
    assert says in " ".join(caught.value.message_dict["path"])
    assert ModelVariant.objects.count() == before


def test_the_import_page_lists_the_gguf_files_in_the_model_folders(client, catalog, operator, folders):
    client.force_login(operator)
    page = client.get(reverse("deployments:model_import")).content.decode()

    assert '<datalist id="gguf-files">' in page and 'list="gguf-files"' in page
    assert '<option value="gemma-plain.gguf">' in page and '<option value="gemma/gemma-chat.gguf">' in page
    assert "escape.gguf" not in page and "secret.gguf" not in page  # outside the folders: not offered
    assert "notes.txt" not in page


def test_a_split_gguf_is_listed_by_its_first_part_and_imported_with_every_parts_bytes(
    client, catalog, operator, folders
):
    """llama.cpp's split GGUF (NAME-00001-of-00002.gguf and its siblings): the import page offers its
    first part alone, whatever case its .gguf is spelled in, and importing it records the weights of
    all its parts (the header is the first part's)."""
    first, _, _ = folders
    one = _header_copy(gemma_package_path(), first / "split" / "gemma-Q4_K_M-00001-of-00002.gguf")
    (first / "split" / "gemma-Q4_K_M-00002-of-00002.gguf").write_bytes(b"\0" * 4096)
    _header_copy(gemma_package_path(), first / "shout" / "GEMMA-00001-of-00003.GGUF")
    (first / "shout" / "GEMMA-00002-of-00003.GGUF").write_bytes(b"\0" * 1024)
    client.force_login(operator)
    page = client.get(reverse("deployments:model_import")).content.decode()
    assert '<option value="split/gemma-Q4_K_M-00001-of-00002.gguf">' in page and "-00002-of-00002" not in page
    assert '<option value="shout/GEMMA-00001-of-00003.GGUF">' in page and "-00002-of-00003" not in page

    variant = model_variant_import_gguf(path="split/gemma-Q4_K_M-00001-of-00002.gguf", name="split", actor=operator)
    assert variant.gguf_file == str(one) and variant.weights_bytes == one.stat().st_size + 4096


def test_the_import_page_says_where_to_put_a_first_gguf(client, catalog, operator, tmp_path, monkeypatch):
    empty = tmp_path / "models"
    empty.mkdir()
    monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", str(empty))
    client.force_login(operator)
    page = client.get(reverse("deployments:model_import")).content.decode()
    assert f"None yet. Put a .gguf file in <code>{empty}</code>" in page


def test_a_gguf_without_a_chat_template_is_flagged(client, catalog, operator, folders):
    client.force_login(operator)
    response = client.post(
        reverse("deployments:model_import"), {"source": "gguf", "gguf-path": "gemma-plain.gguf", "gguf-name": "plain"}
    )
    assert response.status_code == 302
    plain = ModelVariant.objects.get(name="plain")
    chat = model_variant_import_gguf(path="gemma/gemma-chat.gguf", name="chat", actor=operator)
    assert plain.has_chat_template is False and chat.has_chat_template is True

    after_import = client.get(response.url).content.decode()  # the catalog, with the import's messages
    assert "plain: the GGUF has no chat template (tokenizer.chat_template)" in after_import
    catalog_page = client.get(reverse("deployments:model_list")).content.decode()
    row = catalog_page.split('<td class="name">plain', 1)[1].split("</tr>", 1)[0]
    assert "no chat template" in row and "chat_template_file" in row
    other = catalog_page.split('<td class="name">chat', 1)[1].split("</tr>", 1)[0]
    assert "no chat template" not in other

    host = HostFactory(name="box")
    new = reverse("deployments:revision_new", args=[host.name])
    form = client.get(new, {"model": plain.pk}).content.decode()
    # plain is a base model (guessed at import): served for completions, it needs no template, and its
    # choice says what it is for rather than what it lacks.
    assert plain.purpose == "completions" and "plain (completions)</option>" in form and ">chat</option>" in form
    posted = client.post(new, {"model_variant": plain.pk, "engine": "llama.cpp", "port": "8080"}).content.decode()
    assert 'id="chat-template-warning"' in posted and "the switch refuses such an answer" in posted
    posted = client.post(new, {"model_variant": chat.pk, "engine": "llama.cpp", "port": "8080"}).content.decode()
    assert 'id="chat-template-warning"' not in posted
    # The warning names the built-in template for the GGUF's family, and goes once a template is given.
    warned = client.post(new, {"model_variant": plain.pk, "engine": "llama.cpp", "port": "8080"}).content.decode()
    assert "chat_template: gemma (llama.cpp&#x27;s built-in template for gemma3 models)" in warned
    for knobs in ("chat_template=gemma", "chat_template_file=gemma3.jinja"):
        given = {"model_variant": plain.pk, "engine": "llama.cpp", "port": "8080", "knobs": knobs}
        assert 'id="chat-template-warning"' not in client.post(new, given).content.decode(), knobs


def test_the_default_model_folder_is_created(settings, tmp_path, monkeypatch):
    """`./scripts/run` registers this machine (`host register-local`) and the agent registers at start:
    both probe it, and the probe makes the data folder's `models` where the guide says to put a GGUF."""
    from hostagent.probe import probe_local

    monkeypatch.delenv("CONTROLPANEL_MODEL_DIRS", raising=False)
    settings.DATA_DIR = tmp_path / "data"
    facts = probe_local().facts

    folder = tmp_path / "data" / "models"
    assert folder.is_dir() and facts["model_dirs"][0] == str(folder)
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)


def test_an_admins_model_folders_are_not_created(settings, tmp_path, monkeypatch):
    from hostagent.probe import probe_local

    monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", str(tmp_path / "theirs"))
    settings.DATA_DIR = tmp_path / "data"
    probe_local()
    assert not os.path.exists(tmp_path / "theirs") and not os.path.exists(tmp_path / "data" / "models")


# A tool-trained family's template (Qwen's shape): it renders the tool definitions it is given.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% for tool in tools %}{{ tool | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
)


def _tools_gguf(path: Path) -> Path:
    """A header-only llama GGUF whose chat template renders tools."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in {"block_count": 4, "embedding_length": 256, "attention.head_count": 4,
                       "attention.head_count_kv": 2, "context_length": 4096}.items():  # fmt: skip
        writer.add_uint32(f"llama.{key}", value)
    writer.add_string("tokenizer.chat_template", TOOLS_TEMPLATE)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_opencode_is_told_a_model_without_a_tool_format_calls_no_tools(catalog, operator, folders):
    """Gemma 3 270M's GGUF has no template (and Gemma's own has no tools): opencode was told
    `tool_call: true` because llama-server parses calls, and waited on calls the model never makes."""
    first, second, _outside = folders
    _tools_gguf(first / "tools.gguf")
    plain = model_variant_import_gguf(path="gemma-plain.gguf", name="plain", actor=operator)
    chat = model_variant_import_gguf(path="gemma/gemma-chat.gguf", name="chat", actor=operator)
    tools = model_variant_import_gguf(path="tools.gguf", name="tools", actor=operator)
    assert (plain.chat_template_tools, chat.chat_template_tools, tools.chat_template_tools) == (False, False, True)

    host = HostFactory(name="box", address="10.0.0.5", model_dirs=[str(first), str(second)])

    def opencode_tool_call(variant: ModelVariant, **knobs: object) -> bool:
        revision = make_revision(
            host=host, engine="llama.cpp", model_variant=variant, served_name=variant.name, port=8080,
            knobs={"ctx_size": 4096, "parallel": 1, **knobs}, message="an export", actor=None,
        )  # fmt: skip
        config = json.loads(revision_export(revision, "opencode").content)
        return next(iter(config["provider"]["selfhosted"]["models"].values()))["tool_call"]

    assert opencode_tool_call(plain) is False
    assert opencode_tool_call(chat) is False
    assert opencode_tool_call(tools) is True
    # A template file the revision names is not read by the panel: the model is given the benefit.
    assert opencode_tool_call(plain, chat_template_file="gemma3.jinja") is True
