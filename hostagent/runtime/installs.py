"""Engine installs: a list of steps (argv + env + description), run one by one.

Each step's output is streamed line by line to a callback as it comes (step i of n, and
the line) and appended to a log file; the first failing step stops the install with the
log tail as the reason; a cancel flag (a threading.Event or a callable) is checked
between lines and while a step is silent, and kills the step's whole process group.

The steps themselves come from the engine adapters (`adapter.install_steps(...)`: the
engine knows its pins, build flags and why); this module only runs them, and reads the
installed version back from the venv (`install_pinned`, `installed_version`).
"""

from __future__ import annotations

import functools
import json
import os
import queue
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from core.secrets_mask import mask_text
from serving.engines.base import InstallStep

from .childenv import child_env
from .processes import is_alive, read_stat, terminate_group

Cancelled = threading.Event | Callable[[], bool] | None

# Several distributions at once, as JSON: {name: version, or null where the venv has none}.
_READ_VERSIONS = (
    "import sys, json, importlib.metadata as m\n"
    "def v(d):\n"
    "    try:\n"
    "        return m.version(d)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    "print(json.dumps({d: v(d) for d in sys.argv[1:]}))"
)


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
    running_dir: str | os.PathLike[str] | None = None,
) -> InstallResult:
    """Run `steps` in order; stop at the first failure, a timeout or a cancel. With `running_dir`,
    each step's process group is noted there while it runs (`stop_leftover_steps`)."""
    t0 = time.monotonic()
    n = len(steps)
    recent: deque[str] = deque(maxlen=tail)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)

    with open(log_path, "a", encoding="utf-8") as log:

        def emit(i: int, step: InstallStep, line: str) -> None:
            line = mask_text(line, secrets)
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
                shown = " ".join(f"{k}={shlex.quote(mask_text(v, secrets))}" for k, v in step.env.items())
                emit(i, step, f"===== env: {shown}")
            emit(i, step, f"$ {shlex.join(list(step.argv))}")
            outcome = _run_step(step, functools.partial(emit, i, step), cancelled, kill_grace, running_dir)
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


# What an install step never takes, even when the host's CONTROLPANEL_PASS_ENV names it: pip's
# own settings (an index, find-links or config file would point pip somewhere the install did not
# choose) and the interpreter's (a path, a startup file, a home). The rest is the host's allowlist
# (childenv.child_env): never the agent's token, broker URL or keys.
STEP_ENV_DROPPED_PREFIXES = ("PIP_", "PYTHON")
STEP_ENV_DROPPED = frozenset({"VIRTUAL_ENV", "__PYVENV_LAUNCHER__"})


def step_environment(step: InstallStep, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment one install step runs with: the host's allowlist of the agent's
    environment without pip's and Python's settings, plus the step's own variables."""
    env = child_env(environ=environ)
    env = {k: v for k, v in env.items() if k not in STEP_ENV_DROPPED and not k.startswith(STEP_ENV_DROPPED_PREFIXES)}
    return {**env, "PYTHONUNBUFFERED": "1", **step.env}


def _run_step(
    step: InstallStep,
    emit: Callable[[str], None],
    cancelled: Cancelled,
    kill_grace: float,
    running_dir: str | os.PathLike[str] | None = None,
) -> int | str:
    """Run one step; the exit code, or "cancelled" / "timeout" / an error message."""
    env = step_environment(step)
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
    note = _note_running(running_dir, proc.pid, step) if running_dir is not None else None
    try:
        return _follow_step(proc, step, emit, cancelled, kill_grace)
    finally:
        if note is not None:
            note.unlink(missing_ok=True)


def _follow_step(
    proc: subprocess.Popen[bytes],
    step: InstallStep,
    emit: Callable[[str], None],
    cancelled: Cancelled,
    kill_grace: float,
) -> int | str:
    """Read a started step's output until it ends, is cancelled or runs out of time."""
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


# a step the agent did not see end ---------------------------------------------------------
# A step runs in its own session (a cancel kills compilers and pip's children with it), so it
# outlives an agent that is killed or restarted in the middle: a compile would go on for minutes
# with nobody to read it, holding every core. Each running step is noted in the running folder
# (pid and start time, against pid reuse); the agent, starting, stops what is noted there.


def _note_running(running_dir: str | os.PathLike[str], pid: int, step: InstallStep) -> Path | None:
    stat = read_stat(pid)
    if stat is None:
        return None
    folder = Path(running_dir)
    folder.mkdir(parents=True, exist_ok=True)
    note = folder / f"{pid}.json"
    record = {"pid": pid, "start_ticks": stat.start_ticks, "step": step.description, "argv0": step.argv[0]}
    note.write_text(json.dumps(record))
    return note


def stop_leftover_steps(running_dir: str | os.PathLike[str], *, grace: float = 5.0) -> list[str]:
    """Stop the install steps a previous run of the agent left running (their whole process
    groups), and forget them; what was stopped, one line each."""
    folder = Path(running_dir)
    stopped: list[str] = []
    for note in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(note.read_text())
            pid, ticks = int(record["pid"]), int(record["start_ticks"])
        except (OSError, ValueError, KeyError, TypeError):
            note.unlink(missing_ok=True)
            continue
        if is_alive(pid, ticks):
            terminate_group(pid, grace=grace)
            stopped.append(f"pid {pid} ({record.get('step', '?')})")
        note.unlink(missing_ok=True)
    return stopped


# pip installs: read the version back ----------------------------------------------------
def venv_python(venv_dir: str | os.PathLike[str]) -> Path:
    return Path(venv_dir) / "bin" / "python"


def installed_version(venv_dir: str | os.PathLike[str], distribution: str, *, timeout: float = 60.0) -> str | None:
    """The version of `distribution` as the venv's own Python reports it, or None."""
    found = venv_package_versions(venv_dir, [distribution], timeout=timeout)
    return found.get(distribution) if found is not None else None


def venv_package_versions(
    venv_dir: str | os.PathLike[str], distributions: Sequence[str], *, timeout: float = 60.0
) -> dict[str, str | None] | None:
    """The versions of `distributions` as the venv's own Python reports them, in one run: a version,
    or None for one the venv does not hold; None when the venv could not be read at all."""
    try:
        done = subprocess.run(
            [str(venv_python(venv_dir)), "-c", _READ_VERSIONS, *distributions],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    return {d: v if isinstance(v, str) and v else None for d, v in found.items() if d in distributions}


def install_pinned(
    steps: Sequence[InstallStep],
    venv_dir: str | os.PathLike[str],
    distribution: str,
    *,
    log_path: str | os.PathLike[str],
    expected: Callable[[str], bool] | str | None = None,
    on_line: Callable[[InstallProgress], None] | None = None,
    cancelled: Cancelled = None,
    secrets: Sequence[str] = (),
    running_dir: str | os.PathLike[str] | None = None,
) -> InstallResult:
    """Run pip install `steps` into `venv_dir`, then read `distribution`'s version back from
    the venv's own Python.

    Fails when nothing is installed, or when `expected` (the exact version, or a predicate)
    does not accept the version read back. The version read back is in `result.version`.
    """
    n = len(steps)
    result = run_install(
        steps, log_path=log_path, on_line=on_line, cancelled=cancelled, secrets=secrets, running_dir=running_dir
    )
    if not result.ok:
        return result
    found = installed_version(venv_dir, distribution)
    line = f"===== installed version read back from {venv_python(venv_dir)}: {distribution} {found or 'NOT FOUND'}"
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(line + "\n")
    if on_line is not None:
        on_line(InstallProgress(n, n, "read back the installed version", line))
    tail = [*result.log_tail, line]
    accepts = expected if callable(expected) else (lambda v: expected is None or v == expected)
    if found is None or not accepts(found):
        wanted = f" {expected}" if isinstance(expected, str) else ""
        reason = f"{distribution}{wanted} was requested but the venv reports {found or 'nothing'}"
        return replace(result, ok=False, reason=reason, log_tail=tail, version=found)
    return replace(result, reason=f"{distribution} {found} installed in {venv_dir}", log_tail=tail, version=found)


def ollama_install_allowed() -> tuple[bool, str]:
    """Whether Ollama's installer can run here (Linux, curl, root or passwordless sudo)."""
    if not sys.platform.startswith("linux"):
        return False, "the Ollama installer script is for Linux"
    if shutil.which("curl") is None:
        return False, "curl is not installed"
    if os.geteuid() == 0:
        return True, "running as root"
    sudo = shutil.which("sudo")
    if sudo and subprocess.run([sudo, "-n", "true"], env=child_env(), capture_output=True, check=False).returncode == 0:
        return True, "passwordless sudo is available"
    return False, "the installer needs root or passwordless sudo; install Ollama by hand"
