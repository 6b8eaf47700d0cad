"""Engine installs as operations: the service validates and queues; the real host agent runs
the adapter's steps (offline, from a wheelhouse built here), streams pip's output into the
operation, reads the version back from the venv and records it on the host."""

from __future__ import annotations

import io
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import CommandError, call_command

from core.models import AuditEvent
from deployments.agent_api import views as agent_views
from deployments.choices import OperationKind, OperationState
from deployments.models import Operation
from deployments.services.installs import install_record, install_request, install_reread
from hardware.models import Host
from hostagent.binaries import install_dir, resolve_binary
from tests.hostagent.runtime.test_installs import build_wheel
from tests.support.operations import record_sent_tasks


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def host(db: Any) -> Host:
    # The folders its agent reports it lets installs read from (CONTROLPANEL_INSTALL_DIRS).
    return Host.objects.create(name="gpu-1", nvml_available=True, install_dirs=["/srv/wheels", "/src"])


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    return record_sent_tasks(monkeypatch)


# --- the service -------------------------------------------------------------------------


def test_install_request_records_an_operation_and_enqueues_it_on_the_hosts_queue(
    host, admin_user, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        op = install_request(host=host, engine="vllm", version="v0.22.0", wheelhouse="/srv/wheels/", actor=admin_user)
    op.refresh_from_db()
    assert op.kind == OperationKind.INSTALL and op.state == OperationState.QUEUED and op.exclusive
    assert op.requested_by == admin_user and op.revision is None
    assert op.params == {
        "engine": "vllm",
        "version": "0.22.0",
        "source_dir": None,
        "cuda": True,  # the host has NVIDIA GPUs
        "wheelhouse": "/srv/wheels",
    }
    assert sent == [
        {"name": "agent.install", "kwargs": {"op_id": str(op.pk)}, "queue": host.queue, "task_id": str(op.pk)}
    ]
    assert AuditEvent.objects.filter(action="operation.install", object_id=str(op.pk), actor=admin_user).exists()


def test_an_operator_installs_from_the_index_only(host, operator, sent, django_capture_on_commit_callbacks):
    """Fails on the old service: any operator could name a folder on the host, and pip ran
    what it found there as the agent's user."""
    with django_capture_on_commit_callbacks(execute=True):
        op = install_request(host=host, engine="vllm", version="0.22.0", actor=operator)
    assert op.params["wheelhouse"] is None and op.params["source_dir"] is None and len(sent) == 1
    Operation.objects.filter(pk=op.pk).update(state=OperationState.SUCCEEDED)
    for options in (
        {"engine": "vllm", "version": "0.22.0", "wheelhouse": "/srv/wheels"},
        {"engine": "llama.cpp", "version": "b7000", "source_dir": "/src/llama.cpp"},
    ):
        with pytest.raises(ValidationError) as info:
            install_request(host=host, actor=operator, **options)
        (field,) = info.value.message_dict
        assert field in options and "Only an admin may install from a folder on the host" in info.value.messages[0]
    assert Operation.objects.count() == 1 and len(sent) == 1


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"wheelhouse": "/tmp/planted"}, "outside the folders gpu-1 allows installs from (/srv/wheels, /src)"),
        ({"wheelhouse": "/srv/wheels-evil"}, "outside the folders gpu-1 allows"),  # a prefix is not a folder
        ({"wheelhouse": "/srv/wheels/../../tmp/planted"}, "without '..'"),
        ({"wheelhouse": "/srv/wheels/\x00"}, "without '..'"),
    ],
)
def test_an_admin_installs_only_from_folders_the_host_reports_it_allows(host, admin_user, sent, options, says):
    """Fails on the old service: any absolute folder was sent to the host."""
    with pytest.raises(ValidationError) as info:
        install_request(host=host, engine="vllm", version="0.22.0", actor=admin_user, **options)
    assert says in info.value.message_dict["wheelhouse"][0]
    assert not Operation.objects.exists() and sent == []


def test_a_host_that_reports_no_install_folders_allows_none(host, admin_user, sent):
    host.install_dirs = []
    host.save()
    with pytest.raises(ValidationError) as info:
        install_request(host=host, engine="vllm", version="0.22.0", wheelhouse="/srv/wheels", actor=admin_user)
    assert info.value.message_dict["wheelhouse"] == [
        "gpu-1 allows installs from no folder: its agent's CONTROLPANEL_INSTALL_DIRS is not set."
    ]
    assert not Operation.objects.exists()


def test_the_agent_reports_its_install_folders_and_a_later_report_replaces_them(db):
    """Fails on the old panel: it kept no install folders."""
    from hardware.services import host_probe_record

    host = host_probe_record(name="far", facts={"install_dirs": ["/srv/wheels/", "/src"]}, inventory={})
    assert host.install_dirs == ["/srv/wheels", "/src"]
    with pytest.raises(ValidationError):
        host_probe_record(name="far", facts={"install_dirs": ["relative"]}, inventory={})
    host = host_probe_record(name="far", facts={}, inventory={})  # an agent that reports none allows none
    assert host.install_dirs == []


def test_llama_cpp_source_builds_may_take_the_current_checkout(host, operator, sent):
    op = install_request(host=host, engine="llama.cpp", version="", source_dir="/src/llama.cpp", cuda=False, actor=None)
    assert op.params["version"] == "" and op.params["source_dir"] == "/src/llama.cpp" and op.params["cuda"] is False
    pinned = Operation.objects.filter(pk=op.pk)
    pinned.update(state=OperationState.SUCCEEDED)  # free the host lock for the next request
    op = install_request(host=host, engine="llama.cpp", version="7000", actor=operator)
    assert op.params["version"] == "b7000"


@pytest.mark.parametrize(
    ("engine", "version", "options", "field"),
    [
        ("tensorrt-llm", "1.0.0", {}, "engine"),
        ("vllm", "", {}, "version"),
        ("vllm", "latest", {}, "version"),
        ("vllm", "0.22", {}, "version"),
        ("sglang", ">=0.5.0", {}, "version"),
        ("vllm", "0.22.0; rm -rf /", {}, "version"),
        ("llama.cpp", "", {}, "version"),
        ("llama.cpp", "master", {}, "version"),
        ("vllm", "0.22.0", {"wheelhouse": "wheels"}, "wheelhouse"),
        ("vllm", "0.22.0", {"source_dir": "/src/vllm"}, "source_dir"),
        ("llama.cpp", "b7000", {"source_dir": "llama.cpp"}, "source_dir"),
        ("llama.cpp", "b7000", {"source_dir": "/src/llama.cpp", "wheelhouse": "/srv/wheels"}, "wheelhouse"),
        ("ollama", "0.12.3", {"wheelhouse": "/srv/wheels"}, "wheelhouse"),
    ],
)
def test_bad_engines_versions_and_paths_are_refused_and_nothing_is_written(
    host, admin_user, sent, django_capture_on_commit_callbacks, engine, version, options, field
):
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(ValidationError) as info:
        install_request(host=host, engine=engine, version=version, actor=admin_user, **options)
    assert field in info.value.message_dict, info.value.message_dict
    assert not Operation.objects.exists()
    assert not AuditEvent.objects.exists()
    assert callbacks == [] and sent == []


def test_a_viewer_may_not_install(host, viewer, sent):
    with pytest.raises(PermissionDenied):
        install_request(host=host, engine="vllm", version="0.22.0", actor=viewer)
    assert not Operation.objects.exists()


def test_install_record_keeps_every_version_with_an_audit_row(host):
    install_record(host=host, engine="vllm", version="0.22.0", path="/s/venvs/vllm-0.22.0", binary="/s/v/bin/vllm")
    install_record(host=host, engine="vllm", version="0.23.0", path="/s/venvs/vllm-0.23.0")
    install_record(host=host, engine="ollama", version="", path="/s/venvs/ollama-latest")
    host.refresh_from_db()
    assert set(host.engine_installs) == {"vllm", "ollama"}
    assert set(host.engine_installs["vllm"]) == {"0.22.0", "0.23.0"}
    assert host.engine_installs["vllm"]["0.22.0"]["path"] == "/s/venvs/vllm-0.22.0"
    assert host.engine_installs["vllm"]["0.22.0"]["binary"] == "/s/v/bin/vllm"
    assert host.engine_installs["vllm"]["0.22.0"]["installed_at"]
    assert set(host.engine_installs["ollama"]) == {"latest"}
    assert AuditEvent.objects.filter(action="engine.install", host=host).count() == 3
    with pytest.raises(ValidationError):
        install_record(host=host, engine="tgi", version="1.0.0", path="/x")
    # One record per folder: "latest" read again as the release it holds replaces the record of that venv,
    # and keeps when and how it was installed.
    first = install_record(host=host, engine="vllm", version="", path="/s/venvs/vllm-latest",
                           details={"install_seconds": 95})  # fmt: skip
    again = {"adopted": True, "install_seconds": 2, "packages": {"transformers": "5.19.0"}}
    install_record(host=host, engine="vllm", version="0.33.0", path="/s/venvs/vllm-latest", details=again,
                   read_again=True)  # fmt: skip
    host.refresh_from_db()
    assert set(host.engine_installs["vllm"]) == {"0.22.0", "0.23.0", "0.33.0"}
    read = host.engine_installs["vllm"]["0.33.0"]
    assert (read["installed_at"], read["install_seconds"], "adopted" in read) == (first["installed_at"], 95, False)
    assert read["packages"] == {"transformers": "5.19.0"}


def test_an_operator_reads_a_recorded_venv_again_and_nothing_else(
    host, operator, viewer, sent, django_capture_on_commit_callbacks
):
    """Read again (the host page's button beside an install): the host reads the folder the panel
    recorded, as `existing` (tests/hostagent/test_adopt_install.py); an operator may, as it runs only
    that venv's own Python, which the engine runs anyway. Another folder cannot be named."""
    venv = {"path": "/s/venvs/vllm-0.33.0", "binary": "/s/venvs/vllm-0.33.0/bin/vllm", "distribution": "vllm"}
    host.engine_installs = {
        "vllm": {"0.33.0": venv, "0.31.0": {"path": "/src/vllm"}},  # 0.31.0: built from a checkout
        "ollama": {"latest": {"path": "/s/venvs/ollama-latest"}},
    }
    host.save(update_fields=["engine_installs"])
    for engine, version, field, says in (
        ("vllm", "0.32.0", "version", "gpu-1 has no recorded vllm install '0.32.0' to read again."),
        (
            "vllm",
            "0.31.0",
            "version",
            "vllm 0.31.0 on gpu-1 is not a venv the host read (/src/vllm): install it again.",
        ),
        ("ollama", "latest", "engine", "Ollama is not installed with pip: there is no venv to read again."),
    ):
        with pytest.raises(ValidationError) as info:
            install_reread(host=host, engine=engine, version=version, actor=operator)
        assert info.value.message_dict[field] == [says]
    with pytest.raises(PermissionDenied):
        install_reread(host=host, engine="vllm", version="0.33.0", actor=viewer)
    assert Operation.objects.count() == 0 and sent == []
    with django_capture_on_commit_callbacks(execute=True):
        op = install_reread(host=host, engine="vllm", version="0.33.0", actor=operator)
    # The venv must still hold 0.33.0: a revision pinned to it runs that folder.
    assert op.params == {
        "engine": "vllm",
        "version": "0.33.0",
        "existing": "/s/venvs/vllm-0.33.0",
        "cuda": False,
        "read_again": True,
    }
    assert op.requested_by == operator and len(sent) == 1
    # The command line: the same refusals (exit 2, one line), and the same operation (once that one ended).
    Operation.objects.filter(pk=op.pk).update(state=OperationState.SUCCEEDED)
    with pytest.raises(CommandError) as info:
        run("engine", "read-again", "--host", host.name, "--engine", "vllm", "--version", "0.32.0")
    assert info.value.returncode == 2 and "no recorded vllm install '0.32.0'" in str(info.value)
    out = run("engine", "read-again", "--host", host.name, "--engine", "vllm", "--version", "0.33.0",
              "--user", operator.username)  # fmt: skip
    assert "Reading again of vllm 0.33.0 on gpu-1" in out and "queued" in out
    assert Operation.objects.latest("created_at").params["existing"] == "/s/venvs/vllm-0.33.0"


def test_resolve_binary_finds_what_the_panel_installed(tmp_path: Path, settings):
    settings.HOST_STATE_DIR = tmp_path
    settings.ENGINE_BINARIES = {}
    venv = install_dir("vllm", "0.22.0")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").write_text("#!/bin/sh\n")
    assert resolve_binary("vllm", "0.22.0") == str(venv / "bin" / "vllm")
    assert resolve_binary("vllm", "v0.22.0") == str(venv / "bin" / "vllm")  # the same release
    # A llama.cpp source build recorded on the host: its build/bin/llama-server.
    src = tmp_path / "llama.cpp"
    (src / "build" / "bin").mkdir(parents=True)
    (src / "build" / "bin" / "llama-server").write_text("")
    installs = {"llama.cpp": {"b7000": {"path": str(src), "installed_at": "2026-01-01T00:00:00"}}}
    assert resolve_binary("llama.cpp", "b7000", installs=installs) == str(src / "build" / "bin" / "llama-server")
    settings.ENGINE_BINARIES = {"vllm": "/opt/pinned/vllm"}
    assert resolve_binary("vllm", "0.22.0") == "/opt/pinned/vllm"  # configured by hand wins


def test_the_command_line_refuses_bad_input_with_exit_2(host):
    for args in (
        ["--engine", "tensorrt-llm", "--version", "1.0.0"],
        ["--engine", "vllm", "--version", "0.22"],
        ["--engine", "vllm", "--version", "0.22.0", "--wheelhouse", "relative"],
        ["--engine", "vllm", "--version", "0.22.0", "--wheelhouse", "/tmp/planted"],
    ):
        with pytest.raises(CommandError) as info:
            run("engine", "install", "--host", host.name, *args)
        assert info.value.returncode == 2
    with pytest.raises(CommandError) as info:
        run("engine", "list", "--host", "nope")
    assert info.value.returncode == 2
    assert not Operation.objects.exists()
    assert "No engines installed" in run("engine", "list", "--host", host.name)


def test_the_command_line_gives_folders_to_admins_only(host, operator, admin_user, sent):
    """Fails on the old command: `--user <operator> --wheelhouse` was queued."""
    with pytest.raises(CommandError) as info:
        run("engine", "install", "--host", host.name, "--engine", "vllm", "--version", "0.22.0",
            "--wheelhouse", "/srv/wheels", "--user", operator.username)  # fmt: skip
    assert info.value.returncode == 2 and "Only an admin may install from a folder" in str(info.value)
    assert not Operation.objects.exists()
    out = run("engine", "install", "--host", host.name, "--engine", "vllm", "--version", "0.22.0",
              "--wheelhouse", "/srv/wheels", "--user", admin_user.username)  # fmt: skip
    assert "queued" in out and Operation.objects.get().params["wheelhouse"] == "/srv/wheels"


# --- end to end through the real host agent ------------------------------------------------


@pytest.mark.engine
@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_install_through_the_real_agent_offline_from_a_wheelhouse(
    lab, admin_user, operator, tmp_path: Path, monkeypatch
):
    host = lab["host"]
    # Every progress report the agent sends, in the order the panel takes them (the live server
    # runs in this process; the real service still records each one). Sampling the row instead
    # misses a short step on a loaded machine.
    reports: list[tuple[str | None, float | None, str | None]] = []
    record = agent_views.operation_progress

    def noted(**report: Any) -> bool:
        reports.append((report["stage"], report["progress"], report["log"]))
        return record(**report)

    monkeypatch.setattr(agent_views, "operation_progress", noted)
    assert host.install_dirs == [str(tmp_path / "wheelhouse")]  # as the agent reported them
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    # A tiny stand-in for vLLM (a real wheel with a `vllm` console script), two releases.
    build_wheel(wheelhouse, "vllm", "0.22.0", console_script="vllm")
    build_wheel(wheelhouse, "vllm", "0.23.0", console_script="vllm")

    def ended(op: Operation) -> Operation:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            op.refresh_from_db()
            if op.state not in (OperationState.QUEUED, OperationState.RUNNING):
                break
            time.sleep(0.2)
        return op

    op = ended(
        install_request(host=host, engine="vllm", version="0.22.0", wheelhouse=str(wheelhouse), actor=admin_user)
    )
    assert op.state == OperationState.SUCCEEDED, (op.error, op.log[-3000:], lab["agent"].log_tail())
    assert op.progress == 1.0
    # The log streamed while the install ran: pip's own lines, step by step, and the progress
    # moved with the steps (step 2 of 2 reports half way) before the end.
    steps = [(stage, progress) for stage, progress, _ in reports if stage and stage.startswith("step ")]
    assert steps[0] == (steps[0][0], 0.0) and steps[0][0].startswith("step 1/2")
    assert any(stage.startswith("step 2/2") and progress == 0.5 for stage, progress in steps)
    moved = [p for _, p, _ in reports if p is not None]
    assert moved == sorted(moved)  # never backwards
    streamed = "".join(log or "" for _, _, log in reports)
    assert "Successfully installed vllm-0.22.0" in streamed  # pip's own lines came as progress
    assert "--no-index --find-links " + str(wheelhouse) in op.log
    assert "Successfully installed vllm-0.22.0" in op.log
    assert "read back" in op.log

    host.refresh_from_db()
    entry = host.engine_installs["vllm"]["0.22.0"]
    venv = Path(lab["tmp"]) / "state" / "venvs" / "vllm-0.22.0"
    assert entry["path"] == str(venv)
    assert entry["package_version"] == "0.22.0"  # read back from the venv, not the request
    # What the planner reads of a vLLM venv, read back with it: the stand-in brings neither.
    assert entry["packages"] == {"transformers": None, "vllm-gguf-plugin": None}
    assert entry["binary"] == str(venv / "bin" / "vllm")
    assert subprocess.run([entry["binary"]], capture_output=True, text=True, check=True).stdout.strip() == "0.22.0"
    assert resolve_binary("vllm", "0.22.0", installs=host.engine_installs) == entry["binary"]
    assert op.result["version"] == "0.22.0" and op.result["binary"] == entry["binary"]
    assert AuditEvent.objects.filter(action="engine.install", host=host, actor=admin_user).exists()
    listed = run("engine", "list", "--host", host.name)
    assert "vllm" in listed and "0.22.0" in listed and str(venv) in listed

    # A release the wheelhouse does not have: exit 1 with pip's reason; nothing recorded.
    with pytest.raises(CommandError) as failed:
        run(
            "engine",
            "install",
            "--host",
            host.name,
            "--engine",
            "vllm",
            "--version",
            "0.24.0",
            "--wheelhouse",
            str(wheelhouse),
            "--wait",
            "--timeout",
            "240",
        )
    assert failed.value.returncode == 1
    assert "No matching distribution found for vllm==0.24.0" in str(failed.value)
    host.refresh_from_db()
    assert set(host.engine_installs["vllm"]) == {"0.22.0"}
    bad = Operation.objects.filter(host=host, kind=OperationKind.INSTALL).order_by("-created_at").first()
    assert bad.state == OperationState.FAILED and bad.result["log_tail"]

    # vllm-gguf-plugin pip-installed into the panel's venv (its metadata, as pip leaves it), then an
    # operator's Read again: the host reads that venv again, and its one record says what it holds now.
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "vllm_gguf_plugin-0.0.5.dist-info").mkdir()
    (site / "vllm_gguf_plugin-0.0.5.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm-gguf-plugin\nVersion: 0.0.5\n"
    )
    again = ended(install_reread(host=host, engine="vllm", version="0.22.0", actor=operator))
    assert again.state == OperationState.SUCCEEDED, (again.error, lab["agent"].log_tail())
    host.refresh_from_db()
    assert set(host.engine_installs["vllm"]) == {"0.22.0"}
    read = host.engine_installs["vllm"]["0.22.0"]
    assert read["packages"] == {"transformers": None, "vllm-gguf-plugin": "0.0.5"}
    assert (read["path"], read["binary"]) == (str(venv), entry["binary"])
    # When and how it was installed stay the install's own: the panel installed it, at that time.
    assert (read["installed_at"], read["install_seconds"], "adopted" in read) == (
        entry["installed_at"],
        entry["install_seconds"],
        False,
    )


def test_an_existing_venv_is_an_admins_inside_the_hosts_install_folders(
    host, admin_user, operator, sent, django_capture_on_commit_callbacks
):
    """`engine install --existing`: the host reads the venv (tests/hostagent/test_adopt_install.py);
    the panel checks who asks and where, as for a wheelhouse (the venv's code runs as the engine)."""
    with pytest.raises(ValidationError) as info:
        install_request(host=host, engine="vllm", version="", existing="/srv/wheels/vllm-cpu", actor=operator)
    assert "Only an admin may install from a folder on the host" in info.value.message_dict["existing"][0]
    with pytest.raises(ValidationError) as info:
        install_request(host=host, engine="vllm", version="", existing="/opt/vllm-cpu", actor=admin_user)
    assert "outside the folders gpu-1 allows installs from" in info.value.message_dict["existing"][0]
    with pytest.raises(ValidationError) as info:
        install_request(host=host, engine="ollama", version="", existing="/srv/wheels/ollama", actor=admin_user)
    assert info.value.message_dict["existing"] == ["Ollama is not installed with pip: there is no venv to record."]
    assert Operation.objects.count() == 0 and sent == []
    with django_capture_on_commit_callbacks(execute=True):
        op = install_request(host=host, engine="vllm", version="", existing="/srv/wheels/vllm-cpu/", actor=admin_user)
    assert op.params == {"engine": "vllm", "version": "", "existing": "/srv/wheels/vllm-cpu", "cuda": False}
    assert len(sent) == 1
