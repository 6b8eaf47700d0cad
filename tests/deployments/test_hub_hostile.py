"""The hub import against an operator with another host's secret and against a hostile mirror,
with the real huggingface_hub client and the local hub (tests/support/fake_hub.py, the test
double for a model hub) found through HF_ENDPOINT:
- only a secret an admin marked as a hub token is sent to a hub (import, download, form, CLI);
  any other name, existing or not, gets one refusal that names no secret;
- file names that are not relative paths inside the repository are skipped, never stored;
- a server that drips its answer a byte every 2 s ends the import at the request deadline."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.urls import reverse

from deployments.models import ModelVariant
from deployments.services.host_models import download_request
from deployments.services.hub_imports import model_variant_import_hub
from deployments.services.secrets import HUB_REFUSAL, secret_set
from tests.hardware.factories import HostFactory
from tests.support.fake_hub import FakeHub
from tests.support.llama import gemma_model_path

pytestmark = pytest.mark.django_db

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
GGUF = "gemma-3-270m-it-Q4_K_M.gguf"
ENGINE_KEY = "sk-engine-key-of-gpu2-do-not-leak"
HUB_TOKEN = "hf_marked_token_0123"
HOSTILE = ["../../etc/x", "/abs", "a\nb", "a\nb.safetensors", "sub/../../x.safetensors", "x\\y.safetensors"]


@pytest.fixture
def hub(monkeypatch):
    hub = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    config = (CONFIGS / "qwen3-32b-awq.json").read_bytes()
    hub.add_repo("meta/gated-27b", {"config.json": (CONFIGS / "qwen3.5-27b.json").read_bytes()}, gated="manual")
    hub.grant(HUB_TOKEN, "meta/gated-27b")
    hub.grant(ENGINE_KEY, "*")  # even a hub that would take it never gets it
    hub.add_repo("Qwen/Qwen3-32B-AWQ", {"config.json": config, "model.safetensors": b"\0" * 2048})
    hub.add_repo("unsloth/gemma-3-270m-it-GGUF", {GGUF: Path(gemma_model_path())})
    hub.add_repo(
        "evil/names",
        {"config.json": config, "model.safetensors": b"\0" * 1024, **{name: b"x" for name in HOSTILE}},
    )
    hub.add_repo("evil/gguf-name", {"x\ty.gguf": Path(gemma_model_path())})
    yield hub
    hub.stop()


@pytest.fixture
def hosts(admin_user):
    gpu1, gpu2 = HostFactory(name="gpu1"), HostFactory(name="gpu2")
    secret_set(host=gpu2, name="engine-key", value=ENGINE_KEY, actor=admin_user)
    secret_set(host=gpu1, name="engine-key", value=ENGINE_KEY, actor=admin_user)
    return gpu1, gpu2


def model(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("model", *args, stdout=out, stderr=io.StringIO())
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, out.getvalue()


def refusal(**kwargs) -> str:
    with pytest.raises(ValidationError) as refused:
        model_variant_import_hub(repo_id="meta/gated-27b", **kwargs)
    return " ".join(refused.value.message_dict["token_secret"])


# --- hub tokens -----------------------------------------------------------------------------


def test_another_hosts_api_key_is_refused_like_a_missing_name_and_never_reaches_the_hub(hub, hosts, operator):
    gpu1, gpu2 = hosts
    existing = refusal(token=f"{gpu2.name}/engine-key", actor=operator)
    missing = refusal(token=f"{gpu2.name}/no-such-secret", actor=operator)
    unknown_host = refusal(token="no-such-host/engine-key", actor=operator)
    assert existing == missing == unknown_host == HUB_REFUSAL
    assert "engine-key" not in existing and "no-such-secret" not in missing
    assert not any(r["token"] for r in hub.requests)  # no secret went to the hub
    assert not ModelVariant.objects.exists()
    # The command line: the same one line for both.
    code_existing, said_existing = model("import", "meta/gated-27b", "--token-secret", "gpu2/engine-key")
    code_missing, said_missing = model("import", "meta/gated-27b", "--token-secret", "gpu2/nope")
    assert code_existing == code_missing == 2 and said_existing == said_missing
    assert "engine-key" not in said_existing
    assert not any(r["token"] for r in hub.requests)


def test_the_import_form_offers_and_takes_only_hub_tokens(hub, hosts, client, operator, admin_user):
    secret_set(host=hosts[0], name="hf", value=HUB_TOKEN, actor=admin_user, hub_token=True)
    client.force_login(operator)
    page = client.get(reverse("deployments:model_import")).content.decode()
    assert 'value="gpu1/hf"' in page and "engine-key" not in page
    answers = []
    for token in ("gpu2/engine-key", "gpu2/nope"):
        answer = client.post(
            reverse("deployments:model_import"), {"source": "hub", "hub-repo_id": "meta/gated-27b", "hub-token": token}
        )
        assert answer.status_code == 200
        answers.append(answer.content.decode())
    for text in answers:
        assert "admin marked as a Hugging Face token" in text
        assert "engine-key" not in text and "nope" not in text
    assert not any(r["token"] for r in hub.requests) and not ModelVariant.objects.exists()


def test_a_download_takes_only_a_hub_token(hub, hosts, operator, admin_user):
    gpu1, _ = hosts
    variant = model_variant_import_hub(repo_id="Qwen/Qwen3-32B-AWQ", actor=operator)
    messages = []
    for name in ("engine-key", "nope"):
        with pytest.raises(ValidationError) as refused:
            download_request(host=gpu1, variant=variant, token_secret=name, actor=operator)
        messages.append(refused.value.message_dict["token_secret"])
    assert messages[0] == messages[1] == [HUB_REFUSAL]
    secret_set(host=gpu1, name="hf", value=HUB_TOKEN, actor=admin_user, hub_token=True)
    op = download_request(host=gpu1, variant=variant, token_secret="hf", actor=operator)
    assert op.params["token_secret"] == "hf"


def test_an_admin_marks_a_hub_token_from_the_command_line_and_it_works(hub, hosts, admin_user, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(HUB_TOKEN + "\n"))
    call_command("secret", "set", "--host", "gpu1", "hf-token", "--user", admin_user.username, stdout=io.StringIO())
    code, said = model("import", "meta/gated-27b", "--token-secret", "gpu1/hf-token")
    assert code == 2 and HUB_REFUSAL in said  # stored, but not marked: refused
    out = io.StringIO()
    call_command(
        "secret", "mark", "--host", "gpu1", "hf-token", "--hub-token", "--user", admin_user.username, stdout=out
    )
    assert "is now a hub token" in out.getvalue()
    listed = io.StringIO()
    call_command("secret", "list", "--host", "gpu1", stdout=listed)
    assert "hf-token (created" in listed.getvalue() and "hub token" in listed.getvalue()
    code, said = model("import", "meta/gated-27b", "--token-secret", "gpu1/hf-token")
    assert code == 0, said
    assert ModelVariant.objects.filter(repo_id="meta/gated-27b").exists()
    assert any(r["token"] for r in hub.requests if "/resolve/" in r["path"])  # the marked token went along
    # `secret set --hub-token` marks it as it stores it.
    monkeypatch.setattr(sys, "stdin", io.StringIO(HUB_TOKEN + "\n"))
    call_command(
        "secret", "set", "--host", "gpu2", "hf", "--hub-token", "--user", admin_user.username, stdout=io.StringIO()
    )
    assert hosts[1].secrets.get(name="hf").hub_token


def test_only_an_admin_marks_a_hub_token(hosts, operator):
    from django.core.exceptions import PermissionDenied

    from deployments.services.secrets import secret_mark

    with pytest.raises(PermissionDenied):
        secret_mark(host=hosts[0], name="engine-key", hub_token=True, actor=operator)
    assert not hosts[0].secrets.get(name="engine-key").hub_token


# --- hostile file names ---------------------------------------------------------------------


def test_hostile_file_names_are_skipped_and_never_stored(hub, operator):
    variant = model_variant_import_hub(repo_id="evil/names", actor=operator)
    assert sorted(f["name"] for f in variant.hub_files) == ["config.json", "model.safetensors"]
    variant = ModelVariant.objects.get(pk=variant.pk)
    stored = json.dumps(
        {f.attname: getattr(variant, f.attname) for f in ModelVariant._meta.concrete_fields}, default=str
    )
    for name in HOSTILE:
        assert json.dumps(name)[1:-1] not in stored
    assert f"Skipped {len(HOSTILE)} file name(s)" in variant.source


def test_a_gguf_whose_name_holds_a_control_character_is_not_imported(hub, operator):
    with pytest.raises(ValidationError):
        model_variant_import_hub(repo_id="evil/gguf-name", actor=operator)
    with pytest.raises(ValidationError) as named:
        model_variant_import_hub(repo_id="evil/gguf-name", gguf_file="x\ty.gguf", actor=operator)
    assert "is not a .gguf file of the repository" in str(named.value)
    assert not ModelVariant.objects.exists()


# --- a drip ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("repo", "prefix"),
    [
        ("Qwen/Qwen3-32B-AWQ", "/api/models/"),  # model info
        ("Qwen/Qwen3-32B-AWQ", "/Qwen/Qwen3-32B-AWQ/resolve/"),  # config.json
        ("unsloth/gemma-3-270m-it-GGUF", "/cdn/"),  # the GGUF header's range
    ],
)
def test_a_hub_that_drips_a_byte_every_2_s_ends_at_the_deadline(hub, operator, settings, repo, prefix):
    settings.HUB_REQUEST_DEADLINE_S = 3
    hub.drip = {prefix: 2.0}
    hub.drip_limit_s = 40  # the drip itself would go on far longer than the deadline
    with pytest.raises(ValidationError) as ended:
        model_variant_import_hub(repo_id=repo, actor=operator)
    assert "did not finish answering" in str(ended.value) and "within 3 s" in str(ended.value)
    assert not ModelVariant.objects.exists()
    # The import let go of the connection: the hub sees the client leave mid-drip.
    for _ in range(150):
        if hub.dripped:
            break
        time.sleep(0.1)
    assert hub.dripped and hub.dripped[0]["ended"] == "client left"
    assert hub.dripped[0]["sent"] < hub.dripped[0]["size"]


def test_the_order_carries_the_token_only_while_it_is_marked(hub, hosts, operator, admin_user):
    """The host gets the token with its download's order; unmarked meanwhile, it gets none."""
    from deployments.agent_api.orders import operation_order
    from deployments.services.secrets import secret_mark

    gpu1, _ = hosts
    variant = model_variant_import_hub(repo_id="Qwen/Qwen3-32B-AWQ", actor=operator)
    secret_set(host=gpu1, name="hf", value=HUB_TOKEN, actor=admin_user, hub_token=True)
    op = download_request(host=gpu1, variant=variant, token_secret="hf", actor=operator)
    assert operation_order(op)["hub_token"] == HUB_TOKEN
    secret_mark(host=gpu1, name="hf", hub_token=False, actor=admin_user)
    assert operation_order(op)["hub_token"] is None


def test_an_admin_sets_and_marks_secrets_on_the_host_secrets_page(hub, hosts, client, admin_user, operator):
    gpu1, _ = hosts
    url = reverse("deployments:host_secrets", args=["gpu1"])
    client.force_login(operator)
    assert client.get(url).status_code == 403
    client.force_login(admin_user)
    page = client.get(url).content.decode()
    assert "engine-key" in page and ENGINE_KEY not in page  # names only, never a value
    stored = client.post(url, {"name": "hf", "value": HUB_TOKEN, "hub_token": "on"})
    assert stored.status_code == 302
    assert gpu1.secrets.get(name="hf").hub_token
    page = client.get(url).content.decode()
    assert HUB_TOKEN not in page
    # The engine key marked by mistake, then unmarked: the import refuses it again.
    mark = reverse("deployments:host_secret_mark", args=["gpu1", "engine-key"])
    assert client.post(mark, {"hub_token": "on"}).status_code == 302
    assert gpu1.secrets.get(name="engine-key").hub_token
    assert client.post(mark, {}).status_code == 302
    assert not gpu1.secrets.get(name="engine-key").hub_token
    assert refusal(token=f"{gpu1.name}/engine-key", actor=operator) == HUB_REFUSAL
    assert model_variant_import_hub(repo_id="meta/gated-27b", token=f"{gpu1.name}/hf", actor=operator)
