"""The host-side exports run what the revision runs (issue 14): the start script and the
systemd unit use the executable the host installed, `systemd-analyze verify` (Debian's
systemd) accepts the unit, and the seed's Ansible role, rendered by ansible-core from our
exported group_vars under its own defaults, starts vLLM with the same argv and environment as
our start script, or the export names each difference and why.

Both start scripts really run: their `exec` lands in a stand-in `vllm` inside a real venv,
which records the argv and environment it was started with.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from deployments.demo_data import LAB2
from deployments.models import DeploymentRevision, ModelVariant
from deployments.presenters import launch_for_revision
from deployments.services.demo import demo_load
from deployments.services.exports import revision_binary, revision_export
from deployments.services.imports import revision_export_ansible, revision_import_ansible
from deployments.services.installs import install_record
from serving.ansible_vars import parse_group_vars
from tests.support.client_tools import systemd_analyze, tool_bin
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ansible"
GROUP_VARS = (FIXTURES / "all.yml").read_text()
ROLE = FIXTURES / "role"
JSON_FLAGS = {"--hf-overrides", "--speculative-config"}
# What activating a venv or starting a shell sets on its own: not part of either script's environment.
SHELL_ENV = {"PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT", "PS1", "LC_CTYPE"}
SHELL_ENV |= {"LAUNCH_RECORD", "LANG"}

STUB = """#!{python}
import json, os, sys
with open(os.environ["LAUNCH_RECORD"], "w") as out:
    json.dump({{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}}, out)
"""


@pytest.fixture(scope="module")
def stand_in_venv(tmp_path_factory: Any) -> Path:
    """A real venv (its activate script) whose bin/vllm records how it was started."""
    venv = tmp_path_factory.mktemp("engine") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)  # noqa: S603
    stub = venv / "bin" / "vllm"
    stub.write_text(STUB.format(python=sys.executable))
    stub.chmod(0o755)
    return venv


def _lab_folders(tmp_path: Path) -> list[str]:
    """The lab's model folders: the exported script starts in the first, as the agent does, so it
    must exist here; the seed's /opt/vllm (its HF_HOME) after it."""
    first = tmp_path / "lab-models"
    first.mkdir(exist_ok=True)
    return [str(first), "/opt/vllm"]


def _installed(host: Any, version: str, venv: Path) -> None:
    install_record(host=host, engine="vllm", version=version, path=str(venv), binary=str(venv / "bin" / "vllm"))


def _run(script: Path, tmp_path: Path) -> dict[str, Any]:
    record = tmp_path / f"{script.stem}.json"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LAUNCH_RECORD": str(record), "LANG": "C.UTF-8"}
    done = subprocess.run(  # noqa: S603 - a script we just rendered, running a stand-in engine
        ["/bin/bash", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(record.read_text())
    seen["env"] = {k: v for k, v in seen["env"].items() if k not in SHELL_ENV and not k.startswith("_OLD_")}
    return seen


def _flags(argv: list[str]) -> dict[str, Any]:
    """`vllm serve MODEL --flag value --switch ...` as {flag: value or None}, JSON values parsed."""
    assert argv[1:2] == ["serve"]
    out: dict[str, Any] = {"<model>": argv[2]}
    rest = argv[3:]
    i = 0
    while i < len(rest):
        flag = rest[i]
        assert flag.startswith("--"), rest
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value = rest[i + 1]
            out[flag] = json.loads(value) if flag in JSON_FLAGS else value
            i += 2
        else:
            out[flag] = None
            i += 1
    return out


def _render_role(cases: dict[str, str], tmp_path: Path) -> dict[str, Path]:
    """ansible-core renders the role's start script once per exported group_vars (one inventory
    group each: the role's defaults under our group_vars, as on the lab's controller)."""
    playbook = tool_bin("ansible-core", "ansible-playbook")
    work = tmp_path / "ansible"
    (work / "inventory" / "group_vars").mkdir(parents=True)
    (work / "roles").mkdir()
    subprocess.run(["/bin/cp", "-r", str(ROLE / "vllm"), str(work / "roles")], check=True)  # noqa: S603
    (work / "site.yml").write_text((ROLE / "site.yml").read_text())
    lines, out = [], {}
    for name, text in cases.items():
        (work / "inventory" / "group_vars" / f"{name}.yml").write_text(text)
        out[name] = work / f"{name}.sh"
        lines += [
            f"[{name}]",
            f"{name}-host ansible_connection=local ansible_python_interpreter={playbook.parent / 'python'} "
            f"start_script_dest={out[name]}",
        ]
    (work / "inventory" / "hosts").write_text("\n".join(lines) + "\n")
    env = {
        **os.environ,
        "ANSIBLE_HOME": str(work / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(work / ".tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "LC_ALL": "C.UTF-8",  # ansible-core refuses a locale that is not UTF-8
        "ANSIBLE_ROLES_PATH": str(work / "roles"),
    }
    done = subprocess.run(  # noqa: S603 - the real ansible-playbook
        [str(playbook), "-i", str(work / "inventory" / "hosts"), str(work / "site.yml")],
        cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return out


def _ours(revision: DeploymentRevision, tmp_path: Path) -> dict[str, Any]:
    script = tmp_path / f"ours-{revision.host.name}-r{revision.number}.sh"
    script.write_text(revision_export(revision, "start-script").content)
    return _run(script, tmp_path)


def _explained(name: str, exported: Any) -> bool:
    """A difference the export listed: by knob, variable or environment name."""
    knob = name[2:].replace("-", "_") if name.startswith("--") else name
    names = {knob, f"vllm_{knob}"}
    names |= {"enable_auto_tool_choice", "vllm_enable_tool_calling"} if knob == "tool_call_parser" else set()
    names |= {"vllm_enable_tool_calling"} if knob == "enable_auto_tool_choice" else set()
    names |= {"served_name"} if knob == "served_model_name" else set()
    names |= {"attention_backend"} if knob == "VLLM_ATTENTION_BACKEND" else set()  # the knob's reason says both
    names |= {"HF_HOME", "HUGGINGFACE_HUB_CACHE"} if knob in ("HF_HOME", "HUGGINGFACE_HUB_CACHE") else set()
    return bool(names & (set(exported.not_exported) | set(exported.defaults)))


def _differences(role: dict[str, Any], ours: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    a, b = _flags(role["argv"]), _flags(ours["argv"])
    diff = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k, "-") != b.get(k, "-")}
    if role["argv"][0] != ours["argv"][0]:
        diff["<binary>"] = (role["argv"][0], ours["argv"][0])
    for key in set(role["env"]) | set(ours["env"]):
        if role["env"].get(key) != ours["env"].get(key):
            diff[key] = (role["env"].get(key), ours["env"].get(key))
    return diff


def test_the_role_runs_the_imported_seed_setup_exactly_as_we_do(catalog, operator, stand_in_venv, tmp_path):
    """vLLM 0.12 (VLLM_ATTENTION_BACKEND still selects the backend): no difference at all, on a
    host whose agent binds engines where the role does (0.0.0.0, as the seed lab's agent reports)."""
    from tests.hardware.factories import HostFactory

    host = HostFactory(name="lab", model_dirs=_lab_folders(tmp_path), engine_state={"bind_host": "0.0.0.0"})
    revision = revision_import_ansible(
        host=host, text=GROUP_VARS, message="the lab", engine_version="0.12.0", actor=operator
    ).revision
    _installed(host, "0.12.0", stand_in_venv)
    exported = revision_export_ansible(revision, binary=revision_binary(revision))
    assert exported.not_exported == {} and exported.defaults == {}
    scripts = _render_role({"seed": exported.text}, tmp_path)
    role, ours = _run(scripts["seed"], tmp_path), _ours(revision, tmp_path)
    assert _differences(role, ours) == {}
    assert role["argv"][0] == str(stand_in_venv / "bin" / "vllm")  # the venv's vllm, not a bare name
    assert ours["cwd"] == host.model_dirs[0]  # where the agent starts it: a bare file name is read there
    assert ours["env"]["HF_HOME"] == ours["env"]["HUGGINGFACE_HUB_CACHE"] == "/opt/vllm/hf-cache"


def test_on_the_vllm_the_role_installs_only_the_ignored_attention_variable_differs(
    catalog, operator, stand_in_venv, tmp_path
):
    from tests.hardware.factories import HostFactory

    host = HostFactory(name="lab", model_dirs=_lab_folders(tmp_path), engine_state={"bind_host": "0.0.0.0"})
    result = revision_import_ansible(host=host, text=GROUP_VARS, message="the lab", actor=operator)
    revision = result.revision
    assert revision.engine_version == "0.33.0"  # what `vllm>=0.17.0` installs: the newest release
    assert any("vllm>=0.17.0" in note for note in result.notes)
    _installed(host, "0.33.0", stand_in_venv)
    exported = revision_export_ansible(revision, binary=revision_binary(revision))
    assert list(exported.not_exported) == ["VLLM_ATTENTION_BACKEND"]
    assert "ignores it" in exported.not_exported["VLLM_ATTENTION_BACKEND"]
    scripts = _render_role({"seed": exported.text}, tmp_path)
    assert _differences(_run(scripts["seed"], tmp_path), _ours(revision, tmp_path)) == {
        "VLLM_ATTENTION_BACKEND": ("TRITON_ATTN", None)
    }
    # ... and the round trip stays exact.
    again = parse_group_vars(exported.text)
    assert (again.knobs, again.env, again.engine_version) == (revision.knobs, revision.env, "0.33.0")


def test_every_revision_of_the_seed_history_runs_as_exported_or_says_why(catalog, stand_in_venv, tmp_path):
    """Revisions that never came from Ansible: every variable the role reads is written, and
    whatever the role would still run differently is listed with its reason."""
    demo_load()
    revisions = list(DeploymentRevision.objects.filter(host__name=LAB2).order_by("number"))
    host = revisions[0].host
    for version in {r.engine_version for r in revisions}:
        _installed(host, version, stand_in_venv)
    exports = {f"r{r.number}": revision_export_ansible(r, binary=revision_binary(r)) for r in revisions}
    scripts = _render_role({name: e.text for name, e in exports.items()}, tmp_path)
    for revision in revisions:
        name = f"r{revision.number}"
        role, ours = _run(scripts[name], tmp_path), _ours(revision, tmp_path)
        unexplained = {k: v for k, v in _differences(role, ours).items() if not _explained(k, exports[name])}
        assert unexplained == {}, (name, unexplained)
        flags = _flags(role["argv"])
        assert flags["--host"] == _flags(ours["argv"])["--host"] != ""
        if revision.model_variant.name == "Qwen3-32B-AWQ":  # a 32K model: never the role's 262144
            assert flags["--max-model-len"] == "32768"
            assert flags["<model>"] == "Qwen/Qwen3-32B-AWQ"
            assert {"max_num_seqs", "max_num_batched_tokens", "VLLM_USE_FLASHINFER_SAMPLER"} <= set(
                exports[name].not_exported
            )
    # The export says all that in its own header, where a person reads it.
    first = exports[f"r{revisions[0].number}"].text
    assert "# Default written: vllm_max_model_len" in first and "# Not exported: max_num_seqs" in first
    assert yaml.safe_load(first)["vllm_max_model_len"] == 32768


def _revision(host: Any, **values: Any) -> DeploymentRevision:
    return make_revision(
        host=host,
        engine="vllm",
        engine_version=values.pop("engine_version", "0.22.0"),
        model_variant=ModelVariant.objects.get(name=values.pop("model", "Qwen3.8-27B-W4A16-AWQ")),
        knobs=values.pop("knobs", {"max_model_len": 65536}),
        env=values.pop("env", {}),
        port=8001,
        message="exports",
        actor=None,
        **values,
    )


def test_systemd_accepts_our_unit_and_it_runs_the_installed_executable(catalog, stand_in_venv, tmp_path):
    from tests.hardware.factories import HostFactory

    analyze = systemd_analyze()
    host = HostFactory(name="gpu1")
    revision = _revision(host, knobs={"max_model_len": 65536, "enforce_eager": True}, env={"NCCL_P2P_DISABLE": "1"})
    with pytest.raises(CommandError, match="no vllm 0.22.0 install is recorded on gpu1"):
        call_command("export", "--host", "gpu1", "--revision", str(revision.number), "--to", "systemd")
    assert launch_for_revision(revision).argv[0] == "vllm"  # the revision page: nothing installed yet
    _installed(host, "0.22.0", stand_in_venv)
    host.refresh_from_db()
    revision.refresh_from_db()
    # The revision page's command and unit run the installed executable too.
    assert launch_for_revision(revision).argv[0] == str(stand_in_venv / "bin" / "vllm")
    out = io.StringIO()
    call_command("export", "--host", "gpu1", "--revision", str(revision.number), "--to", "systemd", stdout=out)
    unit = tmp_path / "vllm.service"
    unit.write_text(out.getvalue())
    exec_start = next(line for line in out.getvalue().splitlines() if line.startswith("ExecStart="))
    assert exec_start.startswith(f"ExecStart={stand_in_venv}/bin/vllm serve philbert440/Qwen3.8-27B-W4A16-AWQ")
    done = subprocess.run(  # noqa: S603 - the real systemd-analyze
        [analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not executable" not in done.stderr


def test_the_export_command_prints_each_target_or_one_line_why_not(catalog, stand_in_venv, tmp_path):
    from tests.hardware.factories import HostFactory

    host = HostFactory(name="gpu1", address="gpu1.lan")
    revision = _revision(host)
    _installed(host, "0.22.0", stand_in_venv)
    for target in ("opencode", "hermes", "aider-settings", "aider-metadata", "systemd", "start-script", "ansible"):
        out, err = io.StringIO(), io.StringIO()
        call_command("export", "--host", "gpu1", "--to", target, stdout=out, stderr=err)
        assert out.getvalue().strip(), target
        assert str(revision.port) in out.getvalue() or target.startswith("aider"), target
    # A model the catalog knows by name only: no hub resolves it, so neither the launch nor the role can.
    stub = ModelVariant.objects.create(name="Nameless-7B", format="hf")
    bad = _revision(host, model=stub.name)
    with pytest.raises(CommandError, match="no repository id") as exc:
        call_command("export", "--host", "gpu1", "--revision", str(bad.number), "--to", "ansible")
    assert exc.value.returncode == 2 and "\n" not in str(exc.value)
    # Unknown context: opencode would never compact, so it is refused, saying why.
    unknown = _revision(host, model=stub.name, knobs={})
    with pytest.raises(CommandError, match="context") as exc:
        call_command("export", "--host", "gpu1", "--revision", str(unknown.number), "--to", "opencode")
    assert exc.value.returncode == 2


def test_jinja_kept_from_an_import_stays_text_when_ansible_renders_the_export(
    catalog, operator, stand_in_venv, tmp_path
):
    """Issue 11's `!unsafe`, now with the real tool: a lookup stored by an import reaches the
    role's template as literal text and runs nothing on the controller."""
    from tests.hardware.factories import HostFactory

    marker = tmp_path / "lookup-ran"
    lookup = "{{ lookup('pipe', 'touch " + str(marker) + "') }}"
    text = GROUP_VARS.replace("vllm_hf_cache_dir: /opt/vllm/hf-cache", f'vllm_hf_cache_dir: "{lookup}"')
    text += f'site_cmd: "{lookup}"\n'
    host = HostFactory(name="lab", model_dirs=_lab_folders(tmp_path))
    revision = revision_import_ansible(
        host=host, text=text, message="hostile", engine_version="0.12.0", actor=operator
    ).revision
    _installed(host, "0.12.0", stand_in_venv)
    exported = revision_export_ansible(revision, binary=revision_binary(revision))
    assert {"vllm_hf_cache_dir", "site_cmd"} <= set(exported.inert)
    script = _render_role({"hostile": exported.text}, tmp_path)["hostile"].read_text()
    assert not marker.exists()
    assert f'export HF_HOME="{lookup}"' in script  # literal text, as imported
