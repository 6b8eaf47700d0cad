"""The manual's commands work as written (docs/operators-guide.md, "First run"): `python manage.py
...` on a shell where the project's .venv is not activated, and `./scripts/run`'s install step
only when pyproject.toml changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"


def _clean_env(tmp_path: Path) -> dict[str, str]:
    """A new user's shell: no venv on PATH, no Django settings, a data folder of its own."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "CONTROLPANEL_DATA_DIR": str(tmp_path / "data"),
    }


def _checkout_with_venv(tmp_path: Path) -> Path:
    """This checkout's files, with `.venv` where ./scripts/run puts it (the test's own venv)."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".venv", ".git", "data", "manage.py"):
            (checkout / entry.name).symlink_to(entry)
    shutil.copy2(ROOT / "manage.py", checkout / "manage.py")
    (checkout / ".venv").symlink_to(Path(sys.prefix))
    return checkout


@pytest.fixture
def system_python_without_django() -> str:
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.fail(f"{SYSTEM_PYTHON} is missing: the test needs a Python outside the venv")
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import django"], capture_output=True)
    if probe.returncode == 0:
        pytest.fail(f"{SYSTEM_PYTHON} has Django itself: the test would prove nothing")
    return SYSTEM_PYTHON


def test_manage_py_runs_through_the_venv_without_activating_it(tmp_path, system_python_without_django) -> None:
    checkout = _checkout_with_venv(tmp_path)
    env = _clean_env(tmp_path)
    for argv in ([system_python_without_django, "manage.py", "help"], ["./manage.py", "help"]):
        done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "No module named" not in done.stderr
        assert "[deployments]" in done.stdout and "catalog" in done.stdout  # the panel's own commands


def test_manage_py_without_a_venv_says_what_to_do(tmp_path, system_python_without_django) -> None:
    checkout = _checkout_with_venv(tmp_path)
    (checkout / ".venv").unlink()
    done = subprocess.run(
        [system_python_without_django, "manage.py", "help"],
        cwd=checkout,
        env=_clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Run ./scripts/run once" in done.stderr
    assert "Traceback" not in done.stderr


# --- scripts/venv-install (the install step of ./scripts/run) ------------------------------------


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """A project folder with the real install script and a stub venv whose python logs its argv
    (a test double for pip: the real install downloads and builds for minutes)."""
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "venv-install", project / "scripts" / "venv-install")
    shutil.copy2(ROOT / "pyproject.toml", project / "pyproject.toml")
    log = tmp_path / "pip.log"
    stub = project / ".venv" / "bin" / "python"
    stub.parent.mkdir(parents=True)
    stub.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    stub.chmod(0o755)
    return project, log


def _install(project: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(project)}
    return subprocess.run(
        [str(project / "scripts" / "venv-install")], env=env, capture_output=True, text=True, timeout=60, check=True
    )


def test_run_skips_the_reinstall_when_pyproject_did_not_change(tmp_path) -> None:
    project, log = _project(tmp_path)
    _install(project)
    assert log.read_text().splitlines() == ["-m pip install -q --upgrade pip", "-m pip install -q -e ."]

    second = _install(project)
    assert "skipping pip install" in second.stdout
    assert len(log.read_text().splitlines()) == 2  # pip was not run again

    with (project / "pyproject.toml").open("a") as handle:
        handle.write("\n# a new dependency\n")
    _install(project)
    assert log.read_text().splitlines()[-1] == "-m pip install -q -e ."
    assert len(log.read_text().splitlines()) == 4


def test_a_failed_install_is_tried_again(tmp_path) -> None:
    project, log = _project(tmp_path)
    stub = project / ".venv" / "bin" / "python"
    stub.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexit 1\n')
    failed = subprocess.run([str(project / "scripts" / "venv-install")], capture_output=True, text=True, timeout=60)
    assert failed.returncode != 0
    stub.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    _install(project)
    assert log.read_text().splitlines()[-1] == "-m pip install -q -e ."
