"""One serving spec (issue 25): for every revision the suite can make (the catalog on each
engine, the demo labs, the seed lab's Ansible import, a hub import with a downloaded copy),
the argv and env on the revision page, in the diff, in the start-script and systemd exports
and in the agent's own start from its order are the same, read through the real views and
services. And every engine's context knob: `32k`, `32K`, `auto`, `-1` and garbage are either
accepted (and the agent's order starts what the page shows) or refused when the revision is
made, by the form, the API and the CLI alike, with the engine's own sentence."""

from __future__ import annotations

import html
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from api.tokens import token_create
from deployments.host_serving import revision_launch
from deployments.models import DeploymentRevision, HostModel, ModelVariant
from deployments.selectors.revision_views import changes_between, revision_view
from deployments.services.demo import demo_load
from deployments.services.exports import revision_export
from deployments.services.imports import model_variant_import_hf_config, revision_import_ansible
from deployments.services.installs import install_record
from hostagent.launch import launch_spec as agent_launch_spec
from serving.diffing.argv import parse_argv
from serving.wire import RevisionLaunch
from tests.hardware.factories import HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
STUB = "#!/bin/sh\nexit 0\n"
MODEL_FOR = {
    "vllm": "Qwen3-32B-AWQ",
    "sglang": "Qwen3.6-35B-A3B-AWQ-4bit",
    "llama.cpp": "Qwen3.5-122B-A10B-Q6_K_XL",
    "ollama": "qwen3:32b",  # an Ollama tag: the catalog has none, _variant records it
}


def _variant(name: str) -> ModelVariant:
    """The catalog's model of MODEL_FOR, or the Ollama tag recorded as an import would (Qwen3's arch)."""
    if name != MODEL_FOR["ollama"]:
        return ModelVariant.objects.get(name=name)
    arch = ModelVariant.objects.get(name=MODEL_FOR["vllm"]).arch
    return ModelVariant.objects.get_or_create(name=name, format="ollama", defaults={"arch": arch})[0]


@pytest.fixture
def models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The agent's model folders (CONTROLPANEL_MODEL_DIRS) in this test: the downloaded copy and
    the seed role's cache live under them."""
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", f"{folder}:/opt/vllm:/srv/models")
    return folder


def _installed(host: Any, tmp_path: Path) -> None:
    """A recorded install (a real executable file) of each revision's engine version on the host,
    so the start script, the unit, the page and the agent all name one executable."""
    for engine, version in set(host.revisions.values_list("engine", "engine_version")):
        folder = tmp_path / "installs" / host.name / f"{engine}-{version or 'latest'}"
        folder.mkdir(parents=True, exist_ok=True)
        binary = folder / "engine"
        binary.write_text(STUB)
        binary.chmod(0o755)
        install_record(host=host, engine=engine, version=version or "latest", path=str(folder), binary=str(binary))
    host.refresh_from_db()


def _script(text: str) -> tuple[list[str], dict[str, str]]:
    env: dict[str, str] = {}
    joined = text.replace("\\\n", " ")
    argv: list[str] = []
    for line in joined.splitlines():
        if line.startswith("export "):
            key, _, value = shlex.split(line[len("export ") :])[0].partition("=")
            env[key] = value
        elif line.startswith("exec "):
            argv = shlex.split(line[len("exec ") :])
    return argv, env


def _unit(text: str) -> tuple[list[str], dict[str, str]]:
    env: dict[str, str] = {}
    argv: list[str] = []
    for line in text.splitlines():
        if line.startswith("Environment="):
            key, _, value = shlex.split(line[len("Environment=") :])[0].partition("=")
            env[key] = value
        elif line.startswith("ExecStart="):
            argv = [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line[len("ExecStart=") :])]
    return argv, env


def _agent(revision: DeploymentRevision) -> tuple[list[str], dict[str, str], int | None]:
    """The agent's start: the order the panel answers, made into a launch on the host."""
    sent = json.loads(json.dumps(revision_launch(revision, host_bound=True).to_dict()))  # through JSON, as sent
    order = RevisionLaunch.from_dict(sent)
    spec = agent_launch_spec(order, installs=revision.host.engine_installs)
    return spec.masked_argv(), spec.masked_env(), order.served_context


def _same_everywhere(client: Any, revision: DeploymentRevision) -> list[str]:
    page = client.get(reverse("deployments:revision_detail", args=[revision.host.name, revision.number]))
    assert page.status_code == 200
    view = revision_view(revision, planner=False, benchmarks=False)
    assert view.argv is not None, f"r{revision.number} on {revision.host.name} makes no launch"
    argv = list(view.argv)
    assert html.escape(shlex.join(argv)) in page.content.decode(), "the page's exact command"
    agent_argv, agent_env, _context = _agent(revision)
    assert agent_argv == argv, "the agent starts what the page shows"
    script_argv, script_env = _script(revision_export(revision, "start-script").content)
    unit_argv, unit_env = _unit(revision_export(revision, "systemd").content)
    assert script_argv == unit_argv == argv
    assert script_env == unit_env == agent_env
    others = DeploymentRevision.objects.filter(host=revision.host).exclude(pk=revision.pk).first()
    if others is not None:  # the diff's command rows are this argv, flag by flag
        diff = changes_between(others, revision)
        rows = {r.key: r.new for s in diff.sections if s.key == "command" for r in s.rows}
        parsed = parse_argv(argv)
        assert all(parsed.get(k, "") == v for k, v in rows.items() if v)
    assert argv[0].startswith("/"), "the installed executable, never a bare name"
    return argv


def test_catalog_revisions_on_each_engine_launch_the_same_everywhere(client, catalog, operator, tmp_path, models_dir):
    client.force_login(operator)
    host = HostFactory(name="every", address="gpu-every.lan", model_dirs=[str(models_dir), "/srv/models"])
    made = []
    for engine, name in MODEL_FOR.items():
        model = _variant(name)
        made.append(make_revision(host=host, engine=engine, model_variant=model, message=engine, actor=operator))
    _installed(host, tmp_path)
    for revision in made:
        argv = _same_everywhere(client, revision)
        assert revision.host.engine_state.get("bind_host") is None  # the panel's setting, the agent's too
        assert "--host" not in argv or argv[argv.index("--host") + 1] == "127.0.0.1"


def test_demo_lab_revisions_launch_the_same_everywhere(client, operator, tmp_path, models_dir, monkeypatch):
    client.force_login(operator)
    hosts = demo_load()
    seen = 0
    for host in hosts:
        _installed(host, tmp_path)
        gguf = {g for g in host.revisions.values_list("model_variant__gguf_file", flat=True) if g}
        if gguf:  # a demo GGUF path is where the demo keeps it: the agent's model folders name it
            folders = {str(Path(g).parent) for g in gguf if g.startswith("/")}
            monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", ":".join([str(models_dir), *sorted(folders)]))
        for revision in host.revisions.select_related("model_variant", "host"):
            _same_everywhere(client, revision)
            seen += 1
    assert seen >= 2


def test_the_seed_ansible_import_launches_what_the_host_runs(client, catalog, operator, tmp_path, models_dir, settings):
    """The seed role binds 0.0.0.0; the host's agent binds where its setting says, and every
    view shows that (the import says how the one maps to the other)."""
    client.force_login(operator)
    host = HostFactory(name="seedlab", address="lab.lan", model_dirs=["/opt/vllm"])
    host.engine_state = {"bind_host": "0.0.0.0"}  # noqa: S104 - as the lab's agent reports it
    host.save()
    settings.ENGINE_BIND_HOST = "0.0.0.0"  # noqa: S104 - the agent's own setting, which it reported
    text = (FIXTURES / "ansible" / "all.yml").read_text()
    result = revision_import_ansible(host=host, text=text, message="the lab", actor=operator)
    assert not any("CONTROLPANEL_ENGINE_BIND_HOST=" in n for n in result.notes)  # same bind: nothing to say
    _installed(host, tmp_path)
    argv = _same_everywhere(client, result.revision)
    assert argv[argv.index("--host") + 1] == "0.0.0.0"

    other = HostFactory(
        name="seedlab2", address="lab2.lan", model_dirs=["/opt/vllm"], engine_state={"bind_host": "127.0.0.1"}
    )
    moved = revision_import_ansible(host=other, text=text, message="the lab, bound locally", actor=operator)
    assert any("CONTROLPANEL_ENGINE_BIND_HOST=0.0.0.0" in n for n in moved.notes)


def test_a_hub_import_with_a_downloaded_copy_runs_the_copy_everywhere(client, catalog, operator, tmp_path, models_dir):
    client.force_login(operator)
    variant = model_variant_import_hf_config(
        text=(FIXTURES / "configs" / "qwen3-32b-awq.json").read_text(),
        name="Hub-Qwen3-32B-AWQ",
        repo_id="someone/Hub-Qwen3-32B-AWQ",
        quantization="awq-int4",
        weights_bytes=19 * 2**30,
        actor=operator,
    )
    host = HostFactory(name="hub", address="hub.lan", model_dirs=[str(models_dir)])
    copy = models_dir / "someone--Hub-Qwen3-32B-AWQ"
    copy.mkdir()
    HostModel.objects.create(host=host, model_variant=variant, path=str(copy), repo_id=variant.repo_id, verified=True)
    revision = make_revision(
        host=host, engine="vllm", model_variant=variant, knobs={"max_model_len": "32k"}, message="hub", actor=operator
    )
    _installed(host, tmp_path)
    argv = _same_everywhere(client, revision)
    assert argv[2] == str(copy), "the page shows the local copy the host opens, not the hub's name"


# --- the context knob of each engine ------------------------------------------------------------

CONTEXT_KNOB = {
    "vllm": "max_model_len",
    "sglang": "context_length",
    "llama.cpp": "ctx_size",
    "ollama": "context_length",
}
ACCEPTED = {
    ("vllm", "32k"): 32_000,
    ("vllm", "32K"): 32_768,
    ("vllm", "auto"): None,
    ("vllm", "-1"): None,
    ("sglang", "32768"): 32_768,
    ("sglang", "32k"): 32_000,  # SGLang 0.5.23 reads SI suffixes; the argv has the number
    ("llama.cpp", "32768"): 32_768,
    ("llama.cpp", "0"): "native",
    ("ollama", "32768"): 32_768,
}
REFUSED = {
    ("vllm", "garbage"): "argument --max-model-len: invalid human_readable_int_or_auto value: 'garbage'",
    ("sglang", "32K"): "argument --context-length: Invalid integer value: '32K'",
    ("sglang", "auto"): "argument --context-length: Invalid integer value: 'auto'",
    ("sglang", "-1"): "SGLang has no 'auto' or -1",
    ("sglang", "garbage"): "argument --context-length: Invalid integer value: 'garbage'",
    ("llama.cpp", "32k"): "llama-server reads --ctx-size 32k as 32 tokens",
    ("llama.cpp", "32K"): "llama-server reads --ctx-size 32K as 32 tokens",
    ("llama.cpp", "auto"): 'error while handling argument "--ctx-size": stoi',
    ("llama.cpp", "-1"): "llama.cpp has no -1 or auto for it",
    ("llama.cpp", "garbage"): 'error while handling argument "--ctx-size": stoi',
    ("ollama", "32k"): "Ollama ignores OLLAMA_CONTEXT_LENGTH='32k'",
    ("ollama", "32K"): "Ollama ignores OLLAMA_CONTEXT_LENGTH='32K'",
    ("ollama", "auto"): "Ollama ignores OLLAMA_CONTEXT_LENGTH='auto'",
    ("ollama", "-1"): "Ollama ignores OLLAMA_CONTEXT_LENGTH='-1'",
    ("ollama", "garbage"): "Ollama ignores OLLAMA_CONTEXT_LENGTH='garbage'",
}


@pytest.fixture
def ctx_host(catalog, operator, tmp_path, models_dir):
    host = HostFactory(name="ctx", address="gpu-ctx.lan", model_dirs=[str(models_dir), "/srv/models"])
    for engine, name in MODEL_FOR.items():  # r1..r4: a parent on each engine
        model = _variant(name)
        make_revision(host=host, engine=engine, model_variant=model, message=f"{engine} parent", actor=operator)
    return host


def _parent(host: Any, engine: str) -> DeploymentRevision:
    return host.revisions.get(engine=engine)


@pytest.mark.parametrize(("engine", "value"), sorted(ACCEPTED))
def test_an_accepted_context_starts_what_the_page_shows(client, ctx_host, operator, tmp_path, engine, value):
    client.force_login(operator)
    parent = _parent(ctx_host, engine)
    knob = CONTEXT_KNOB[engine]
    token = token_create(user=operator, name="t", actor=operator).secret
    response = client.post(
        f"/api/v1/hosts/{ctx_host.name}/revisions/",
        data=json.dumps({"parent": parent.number, "set": {knob: value}, "message": f"{knob}={value}"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 201, response.content
    revision = ctx_host.revisions.get(number=response.json()["number"])
    _installed(ctx_host, tmp_path)
    argv = _same_everywhere(client, revision)
    _argv, _env, served = _agent(revision)
    expected = ACCEPTED[(engine, value)]
    if expected == "native":
        expected = revision.model_variant.model_arch.native_context
    assert served == expected
    flag = {"vllm": "--max-model-len", "sglang": "--context-length", "llama.cpp": "--ctx-size"}.get(engine)
    if flag:  # as typed, or in the one spelling the engine has for it (vLLM's -1 is its auto; SGLang's 32k its number)
        spelled = {("vllm", "-1"): "auto", ("sglang", "32k"): "32000"}.get((engine, value), value)
        assert parse_argv(argv)[flag] == spelled
    else:
        assert _env["OLLAMA_CONTEXT_LENGTH"] == value


def _refusals(client: Any, host: Any, operator: Any, engine: str, knob: str, value: str) -> list[str]:
    """What the form, the API and the CLI say to `knob=value` on a revision of `engine`."""
    parent = _parent(host, engine)
    said: list[str] = []
    client.force_login(operator)
    form = {
        "model_variant": parent.model_variant_id,
        "engine": engine,
        "engine_version": "",
        "knobs": f"{knob}={value}",
        "env": "",
        "served_name": "",
        "port": parent.port,
        "parent": parent.number,
        "message": "context",
    }
    page = client.post(reverse("deployments:revision_new", args=[host.name]), form)
    assert page.status_code == 200
    said.append(html.unescape(page.content.decode()))
    token = token_create(user=operator, name="t", actor=operator).secret
    api = client.post(
        f"/api/v1/hosts/{host.name}/revisions/",
        data=json.dumps({"parent": parent.number, "set": {knob: value}, "message": "context"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert api.status_code == 400
    said.append(api.content.decode())
    with pytest.raises(CommandError) as cli:
        call_command(
            "revision", "create", "--host", host.name, "--from", str(parent.number),
            "--set", f"{knob}={value}", "--message", "context", "--user", operator.username,
        )  # fmt: skip
    said.append(str(cli.value))
    return said


@pytest.mark.parametrize("engine", sorted(CONTEXT_KNOB))
def test_a_refused_context_is_refused_at_creation_with_the_engines_sentence(client, ctx_host, operator, engine):
    before = ctx_host.revisions.count()
    for (which, value), sentence in sorted(REFUSED.items()):
        if which != engine:
            continue
        for said in _refusals(client, ctx_host, operator, engine, CONTEXT_KNOB[engine], value):
            assert sentence in said.replace('\\"', '"'), (value, said[-300:])
    assert ctx_host.revisions.count() == before


def test_client_exports_of_a_remote_host_without_an_address_refuse_naming_the_fix(catalog, operator):
    """A host on another machine declared without an address: a laptop would connect to itself."""
    from serving.exports import NotExportable

    host = HostFactory(name="far", address="127.0.0.1")
    model = ModelVariant.objects.get(name=MODEL_FOR["vllm"])
    revision = make_revision(
        host=host, engine="vllm", model_variant=model, knobs={"max_model_len": 8192}, message="m", actor=operator
    )
    for target in ("opencode", "hermes", "aider-settings"):
        with pytest.raises(NotExportable, match="far's address: 127.0.0.1 is a loopback.*its host page, Address"):
            revision_export(revision, target)
    host.address = "far.lan"
    host.save()
    revision.refresh_from_db()
    assert "http://far.lan:8001/v1" in revision_export(revision, "opencode").content


def test_the_seed_import_on_a_host_without_model_folders_offers_to_record_hf_home(catalog, operator, admin_user):
    from django.core.exceptions import PermissionDenied, ValidationError

    host = HostFactory(name="bare", address="bare.lan", model_dirs=[])
    text = (FIXTURES / "ansible" / "all.yml").read_text()
    with pytest.raises(ValidationError) as refused:
        revision_import_ansible(host=host, text=text, message="the lab", actor=operator)
    said = " ".join(refused.value.message_dict["env"])
    assert "An admin can record /opt/vllm/hf-cache as bare's model folder" in said
    with pytest.raises(PermissionDenied):
        revision_import_ansible(host=host, text=text, message="the lab", record_model_dirs=True, actor=operator)
    result = revision_import_ansible(host=host, text=text, message="the lab", record_model_dirs=True, actor=admin_user)
    host.refresh_from_db()
    assert host.model_dirs == ["/opt/vllm/hf-cache"]
    assert result.revision.env["HF_HOME"] == "/opt/vllm/hf-cache"
    assert any("/opt/vllm/hf-cache is now one of bare's model folders" in n for n in result.notes)
