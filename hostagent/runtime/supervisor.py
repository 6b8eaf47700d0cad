"""Supervise the one inference engine of this host: start, wait ready, verify, stop, report.

The engine runs as a detached process group (its own session, stdin from /dev/null,
stdout and stderr appended to STATE_DIR/engine.log), so it outlives the Celery worker
that started it. STATE_DIR/engine.json records it (pid, pgid, start ticks against pid
reuse, revision, served name, port, masked argv), so a new Supervisor on the same folder,
in a restarted worker or another process, sees and controls the same engine.

One engine per host: `start()` first stops the engine the panel started before. A port held
by anything else makes it refuse with PortBusyError naming the holder and leave it alone,
unless the host's policy (CONTROLPANEL_STOP_STRAYS=engines, see strays.py) allows stopping
an inference server the panel did not start: then it is stopped, noted in the engine log and
reported in the result (and so in the operation's log).

    sup = Supervisor(Path("/var/lib/llm-panel"))
    result = sup.start(spec, revision_label="r12", on_progress=report)  # raises on failure
    sup.status()            # EngineStatus(running=True, revision_label="r12", ...)
    sup.log_tail(200)       # masked
    sup.stop()              # SIGTERM to the group, SIGKILL after the grace period
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import httpx

from core.atomicfile import DiskFullError, is_disk_full_os_error
from core.secrets_mask import mask_text
from serving.engines.base import PRIVATE_FILE, LaunchSpec
from serving.purpose import COMPLETIONS

from .childenv import engine_env
from .errors import EngineExitedError, EngineStartError, PortBusyError
from .local_http import engine_get
from .logtail import file_size, read_lines, tail_lines
from .processes import (
    group_members,
    is_alive,
    read_stat,
    reap,
    register_child,
    terminate_group,
    terminate_tree,
)
from .readiness import ChatCheck, ProgressCallback, ReadyResult, verify_answer, wait_ready
from .state import EngineRecord, Pause, StateDir, utc_now_iso
from .strays import STOP_STRAYS_ENV, find_port_holder, listening_inodes, stop_strays_policy

__all__ = [
    "EngineStatus",
    "StartResult",
    "StopResult",
    "StoppedProcess",
    "Supervisor",
]

# Lines of a failed start's log read for its cause (readiness shows the last SHOWN_TAIL_LINES): vLLM's
# worker exception sits 160 lines above the end of its log.
FAILURE_TAIL_LINES = 400
ORPHAN_SOCKET_WAIT = 5.0  # seconds a port may stay listening with no visible owner


@dataclass(frozen=True)
class StoppedProcess:
    """An engine process stopped to make room (or by stop())."""

    pid: int
    cmdline: list[str]  # masked
    kind: Literal["panel", "stray"]  # started by the panel, or found on the port
    revision_label: str | None
    graceful: bool  # exited on SIGTERM within the grace period (False = SIGKILLed)
    seconds: float


@dataclass(frozen=True)
class StopResult:
    was_running: bool
    stopped: StoppedProcess | None = None
    revision_label: str | None = None

    @property
    def graceful(self) -> bool:
        return self.stopped is None or self.stopped.graceful


@dataclass(frozen=True)
class StartResult:
    pid: int
    pgid: int
    engine: str
    port: int
    served_name: str
    revision_label: str
    revision_id: str | None
    started_at: str
    seconds: float  # whole start: stopping, launching, loading, verifying
    ready: ReadyResult
    chat: ChatCheck | None  # the test request (a chat, or a completion for a completions model); None when verify=False
    stopped: list[StoppedProcess] = field(default_factory=list)
    log_path: str = ""


@dataclass(frozen=True)
class EngineStatus:
    """What this host serves. `phase`: stopped | starting | ready | dead."""

    running: bool
    phase: str
    pid: int | None = None
    pgid: int | None = None
    engine: str | None = None
    revision_label: str | None = None
    revision_id: str | None = None
    served_name: str | None = None
    host: str | None = None
    port: int | None = None
    started_at: str | None = None
    ready_at: str | None = None
    uptime_seconds: float | None = None
    argv: list[str] = field(default_factory=list)  # masked
    log_path: str | None = None
    health_url: str | None = None
    healthy: bool | None = None  # only with status(probe=True)
    watchdog_paused: bool = False


class Supervisor:
    """The host's engine supervisor, backed by a state folder shared across processes."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        secrets: Iterable[str] = (),
        stop_grace: float = 30.0,
        lock_timeout: float = 60.0,
        stop_strays: str | None = None,
    ) -> None:
        """`secrets`: values to mask in log tails (start() adds the spec's own). `stop_strays`:
        "never" or "engines" (None: the host's CONTROLPANEL_STOP_STRAYS, default never)."""
        self.stop_strays = stop_strays if stop_strays in ("never", "engines") else stop_strays_policy()
        self.state = StateDir(state_dir)
        self.stop_grace = stop_grace
        self.lock_timeout = lock_timeout
        self._secrets: set[str] = {s for s in secrets if s}

    @property
    def log_path(self) -> Path:
        return self.state.log_file

    @property
    def owner(self) -> str:
        """What marks the engines this supervisor starts (ENGINE_OWNER_ENV): its state folder."""
        return str(self.state.path.resolve())

    # start -----------------------------------------------------------------------
    def start(
        self,
        spec: LaunchSpec,
        *,
        revision_label: str,
        revision_id: str | None = None,
        on_progress: ProgressCallback | None = None,
        ready_timeout: float = 600.0,
        verify: bool = True,
        stop_grace: float | None = None,
        by_watchdog: bool = False,
    ) -> StartResult:
        """Stop what runs, start `spec`, wait until ready, verify one chat completion (one completion
        for a completions model, `spec.purpose`).

        A start made by a person (anything but the watchdog's restart, `by_watchdog`) gives the
        watchdog a fresh restart budget once the engine is ready.

        Raises PortBusyError (port held by a non-engine, left running), EngineExitedError
        (the process died while loading), EngineNotReadyError (timeout) or
        EngineVerifyError; all EngineStartErrors carry the log tail and the list of
        engines stopped before the attempt. A failed start leaves no process behind.
        The watchdog is paused for the whole call.
        """
        t0 = time.monotonic()
        grace = self.stop_grace if stop_grace is None else stop_grace
        self._secrets.update(s for s in spec.secret_values if s)

        def progress(stage: str, fraction: float, message: str) -> None:
            if on_progress is not None:
                on_progress(stage, round(min(max(fraction, 0.0), 1.0), 3), message)

        with (
            self.state.locked(self.lock_timeout),
            self.watchdog_paused(f"starting revision {revision_label}"),
        ):
            progress("stopping", 0.0, "stopping the current engine")
            stopped: list[StoppedProcess] = []
            previous = self._stop_locked(grace)
            if previous.stopped is not None:
                stopped.append(previous.stopped)
                progress("stopping", 0.05, f"stopped revision {previous.revision_label or '?'}")
            stray = self._clear_port(spec, grace)
            if stray is not None and stray.kind == "panel":
                stopped.append(stray)
                progress("stopping", 0.08, f"stopped an engine this panel started (pid {stray.pid}), record lost")
            elif stray is not None:
                stopped.append(stray)
                progress(
                    "stopping",
                    0.08,
                    f"stopped an inference server the panel did not start, on port {spec.port}: pid {stray.pid} "
                    f"({shlex.join(stray.cmdline)}), as the host's policy {STOP_STRAYS_ENV}=engines allows",
                )

            progress("launching", 0.1, f"launching {spec.engine} on port {spec.port}")
            record, proc = self._launch(spec, revision_label, revision_id)

            def run_tail() -> list[str]:
                return tail_lines(
                    self.log_path, FAILURE_TAIL_LINES, secrets=self._secrets, start_offset=record.log_offset
                )

            def loading(stage: str, fraction: float, message: str) -> None:
                progress(stage, 0.1 + 0.8 * fraction, message)

            try:
                ready = wait_ready(
                    spec,
                    timeout=ready_timeout,
                    process_alive=lambda: proc.poll() is None,
                    on_progress=loading,
                    log_tail=run_tail,
                )
                chat = None
                if verify:
                    test = "completion (a completions model)" if spec.purpose == COMPLETIONS else "chat completion"
                    progress("verify", 0.9, f"sending one short {test}")
                    chat = verify_answer(spec, log_tail=run_tail)
            except EngineStartError as exc:
                exc.returncode = proc.poll()
                if isinstance(exc, EngineExitedError) and exc.returncode is not None:
                    exc.reason = f"{exc.reason} [exit code {exc.returncode}]"
                    exc.args = (exc.reason,)
                exc.stopped = stopped
                exc.log_tail = run_tail()
                self._discard(record)
                raise
            except BaseException:
                self._discard(record)
                raise

            record.phase = "ready"
            record.ready_at = utc_now_iso()
            self.state.write_engine(record)
            if not by_watchdog:
                self.state.fresh_watchdog_budget()
            seconds = time.monotonic() - t0
            message = f"revision {revision_label} is serving {spec.served_name} ({seconds:.1f} s)"
            progress("ready", 1.0, message)
            return StartResult(
                **record.carried(StartResult)
                | {"seconds": seconds, "ready": ready, "chat": chat, "stopped": stopped, "log_path": str(self.log_path)}
            )

    def restart(
        self,
        spec: LaunchSpec,
        *,
        ready_timeout: float = 600.0,
        verify: bool = False,
        on_progress: ProgressCallback | None = None,
    ) -> StartResult:
        """Start `spec` again under the revision recorded in the state folder (watchdog use)."""
        record = self.state.read_engine()
        return self.start(
            spec,
            revision_label=record.revision_label if record else "",
            revision_id=record.revision_id if record else None,
            on_progress=on_progress,
            ready_timeout=ready_timeout,
            verify=verify,
            by_watchdog=True,
        )

    def _with_private_files(self, spec: LaunchSpec) -> list[str]:
        """Write the spec's private files (0600, in a 0700 folder) and put their paths in argv."""
        if not spec.private_files:
            return list(spec.argv)
        folder = self.state.path / "private"
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)
        paths: dict[str, str] = {}
        for name, content in spec.private_files.items():
            path = folder / Path(name).name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(content)
            path.chmod(0o600)
            paths[PRIVATE_FILE + name] = str(path)
        return [paths.get(a, a) for a in spec.argv]

    def _launch(
        self, spec: LaunchSpec, revision_label: str, revision_id: str | None
    ) -> tuple[EngineRecord, subprocess.Popen[bytes]]:
        self.state.rotate_log()
        log_offset = file_size(self.log_path)
        masked = [mask_text(a, self._secrets) for a in spec.masked_argv()]
        env = engine_env(spec.env, owner=self.owner)  # an allowlist: never the agent's token or broker URL
        if "TMPDIR" not in spec.env:  # a revision that names one keeps it
            env["TMPDIR"] = str(self._fresh_tmp())
        argv = self._with_private_files(spec)
        header = (
            f"===== {utc_now_iso()} panel: starting {spec.engine} revision {revision_label} "
            f"as {spec.served_name!r} on {spec.host}:{spec.port}\n"
            f"===== argv: {shlex.join(masked)}\n"
            f"===== env: {', '.join(sorted(spec.env)) or '(none added)'}\n"
        )
        started_at = utc_now_iso()

        def record_for(proc: subprocess.Popen[bytes] | None) -> EngineRecord:
            stat = read_stat(proc.pid) if proc is not None else None
            return EngineRecord(
                pid=proc.pid if proc is not None else 0,
                pgid=proc.pid if proc is not None else 0,
                start_ticks=stat.start_ticks if stat else 0,
                engine=spec.engine,
                revision_label=revision_label,
                revision_id=revision_id,
                served_name=spec.served_name,
                host=spec.host,
                port=spec.port,
                argv=masked,
                env_keys=sorted(spec.env),
                health_url=spec.health_url,
                models_url=spec.models_url,
                chat_url=spec.chat_url,
                metrics_url=spec.metrics_url,
                log_path=str(self.log_path),
                log_offset=log_offset,
                started_at=started_at,
            )

        with open(self.log_path, "ab") as log:
            try:
                os.write(log.fileno(), header.encode())  # unbuffered: a failed write leaves nothing to flush
            except OSError as exc:  # nothing started: the start fails with the reason
                if is_disk_full_os_error(exc):
                    raise DiskFullError(self.log_path, kept=": nothing was started") from exc
                raise
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=spec.cwd,
                    env=env,
                    start_new_session=True,  # own session and process group: outlives us
                    close_fds=True,
                )
            except OSError as exc:
                message = f"cannot run {masked[0] if masked else '?'}: {exc.strerror or exc}"
                log.write(f"===== {message}\n".encode())
                log.flush()
                self.state.record_start(record_for(None))  # a start that never ran is a start too
                raise EngineExitedError(message, [message]) from exc
        register_child(proc)
        record = record_for(proc)
        self.state.write_engine(record)
        self.state.record_start(record)
        return record, proc

    @property
    def tmp_dir(self) -> Path:
        """The engine's own TMPDIR: vLLM leaves its ZeroMQ sockets there at every start, so it is
        emptied before each start and after each stop. A short name in the TMPDIR of the process
        that started it (a Unix socket's path holds 107 bytes at most, and a state folder's may be
        long), noted in the state folder so that any process that stops the engine finds it. A note
        is followed only to a folder of this state folder's name: one copied from another state
        folder names that one's engine's TMPDIR, which is not ours to empty."""
        noted = self.state.path / "engine-tmp"
        with contextlib.suppress(OSError):
            path = Path(noted.read_text().strip())
            ours = path.name == self._tmp_name or path.name.startswith(f"{self._tmp_name}-")
            if path.is_absolute() and ours and ".." not in path.parts:
                return path
        return Path(tempfile.gettempdir()) / self._tmp_name

    @property
    def _tmp_name(self) -> str:
        """The engine's TMPDIR's name: one per state folder."""
        return f"cp-engine-{hashlib.sha256(str(self.state.path.resolve()).encode()).hexdigest()[:12]}"

    def _fresh_tmp(self) -> Path:
        """The engine's TMPDIR, empty, 0700 and ours: what an earlier engine left there is removed."""
        self._clear_tmp()
        path = Path(tempfile.gettempdir()) / self._tmp_name
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # the name is taken (the TMPDIR is shared: another user's): one beside it
            path = Path(tempfile.mkdtemp(prefix=f"{self._tmp_name}-"))
        (self.state.path / "engine-tmp").write_text(str(path))
        return path

    def _clear_tmp(self) -> None:
        """Remove what the stopped engine left in its TMPDIR (its group is gone: nothing writes there);
        a folder or link under its name that this user does not own is not ours, and is left alone."""
        path = self.tmp_dir
        try:
            owner = path.lstat().st_uid
        except OSError:
            return
        if owner != os.geteuid():
            return
        if path.is_symlink():  # never followed
            path.unlink()
        shutil.rmtree(path, ignore_errors=True)

    def _discard(self, record: EngineRecord) -> None:
        """Kill a start that failed and forget it; its output stays in the log."""
        terminate_group(record.pgid, grace=5.0)
        reap(record.pid)
        self._clear_tmp()
        self.state.clear_engine()
        self._note(f"start of revision {record.revision_label} failed")

    def _clear_port(self, spec: LaunchSpec, grace: float) -> StoppedProcess | None:
        """Make the port free of processes the panel did not start: refuse (PortBusyError naming the
        holder) unless the holder is an inference server and the policy is "engines"."""
        holder = find_port_holder(spec.port, host=spec.host)
        # A process that just died (SIGKILL, crash) keeps its listening socket for a moment
        # while its threads tear down, with no visible owner: give it time to go away.
        deadline = time.monotonic() + ORPHAN_SOCKET_WAIT
        while holder is not None and holder.pid is None and time.monotonic() < deadline:
            time.sleep(0.05)
            holder = find_port_holder(spec.port, host=spec.host)
        if holder is None:
            return None
        cmdline = [mask_text(a, self._secrets) for a in holder.cmdline]
        if holder.pid is not None and holder.owner == self.owner:
            # Ours, though no record names it (a worker killed in the middle of a start).
            note = f"stopped an engine this panel started whose record was lost: pid {holder.pid}"
            return self._stop_holder(holder.pid, spec.port, cmdline, grace, "panel", f"by pid {holder.pid}", note)
        if holder.pid is None or not holder.is_inference_server:
            why = (
                "its command line is not an inference server's"
                if holder.pid is not None and not holder.engine_like_cmdline
                else "it does not answer like an inference server"
                if holder.pid is not None
                else "its owner is not visible to this user"
            )
            raise PortBusyError(
                spec.port,
                holder.pid,
                cmdline,
                f"port {spec.port} is held by pid {holder.pid} ({shlex.join(cmdline) or '?'}); "
                f"not stopping it because {why}. Stop it yourself or choose another port."
                if holder.pid is not None
                else f"port {spec.port} is held by a process this user cannot see; stop it or choose another port.",
            )
        if self.stop_strays != "engines":
            raise PortBusyError(
                spec.port,
                holder.pid,
                cmdline,
                f"port {spec.port} is held by pid {holder.pid} ({shlex.join(cmdline) or '?'}), an inference server "
                f"this panel did not start (another panel's engine, or one started by hand); not stopping it: the "
                f"host's policy is {STOP_STRAYS_ENV}=never. Stop it yourself, choose another port, or set "
                f"{STOP_STRAYS_ENV}=engines on this host.",
            )
        note = f"stopped a stray engine on port {spec.port}: pid {holder.pid} ({shlex.join(cmdline)})"
        return self._stop_holder(
            holder.pid, spec.port, cmdline, grace, "stray", f"after stopping pid {holder.pid}", note
        )

    def _stop_holder(
        self,
        pid: int,
        port: int,
        cmdline: list[str],
        grace: float,
        kind: Literal["panel", "stray"],
        still_held: str,
        note: str,
    ) -> StoppedProcess:
        """Stop the process tree holding the engine's port and wait for the port to be free
        (PortBusyError, "port N is still held <still_held>", when it is not); `note` goes to the log."""
        t0 = time.monotonic()
        graceful = terminate_tree(pid, grace=grace)
        reap(pid)
        if not _wait_port_free(port, 10.0):
            raise PortBusyError(port, pid, cmdline, f"port {port} is still held {still_held}")
        self._note(note)
        return StoppedProcess(pid, cmdline, kind, None, graceful, time.monotonic() - t0)

    def _note(self, message: str) -> None:
        """Append one panel line to the engine log, so the log tells the whole story."""
        with open(self.log_path, "ab") as log:
            log.write(f"===== {utc_now_iso()} panel: {message}\n".encode())

    # stop ------------------------------------------------------------------------
    def stop(self, *, grace: float | None = None) -> StopResult:
        """Stop the panel's engine: SIGTERM to its group, SIGKILL after `grace` seconds."""
        with self.state.locked(self.lock_timeout):
            result = self._stop_locked(self.stop_grace if grace is None else grace)
            self.state.clear_watchdog_retry()
            return result

    def _stop_locked(self, grace: float) -> StopResult:
        record = self.state.read_engine()
        if record is None:
            return StopResult(was_running=False)
        alive = is_alive(record.pid, record.start_ticks)
        stat = read_stat(record.pid)
        reused = stat is not None and stat.start_ticks != record.start_ticks
        stopped = None
        # With the leader gone, survivors of its group are still ours (a pid is not reused
        # while it names a live group); with the pid reused, the group is someone else's.
        if not reused and (alive or group_members(record.pgid)):
            t0 = time.monotonic()
            graceful = terminate_group(record.pgid, grace=grace)
            reap(record.pid)
            stopped = StoppedProcess(
                record.pid, record.argv, "panel", record.revision_label, graceful, time.monotonic() - t0
            )
            _wait_port_free(record.port, 10.0)
            how = "gracefully" if graceful else "with SIGKILL"
            self._note(f"stopped revision {record.revision_label} {how}")
        if not reused:
            self._clear_tmp()
        self.state.clear_engine()
        return StopResult(was_running=alive, stopped=stopped, revision_label=record.revision_label)

    # status and logs -------------------------------------------------------------
    def status(self, *, probe: bool = False) -> EngineStatus:
        """What runs now; with `probe`, also ask its health URL (2 s timeout)."""
        paused = bool(self.state.active_pauses())
        record = self.state.read_engine()
        if record is None:
            return EngineStatus(running=False, phase="stopped", log_path=str(self.log_path), watchdog_paused=paused)
        alive = is_alive(record.pid, record.start_ticks)
        healthy = None
        if probe and alive:
            try:
                healthy = engine_get(record.health_url, timeout=2.0).status_code == 200
            except httpx.HTTPError:
                healthy = False
        uptime = None
        if alive:
            started = datetime.fromisoformat(record.started_at)
            uptime = (datetime.now(UTC) - started).total_seconds()
        return EngineStatus(
            **record.carried(EngineStatus)
            | {
                "running": alive,
                "phase": record.phase if alive else "dead",
                "uptime_seconds": uptime,
                "argv": list(record.argv),
                "healthy": healthy,
                "watchdog_paused": paused,
            }
        )

    def log_tail(self, lines: int = 200) -> list[str]:
        """The engine log's last `lines` lines, secrets masked (bounded memory)."""
        return tail_lines(self.log_path, lines, secrets=self._secrets)

    def log_since(self, offset: int, *, max_bytes: int = 256 * 1024) -> tuple[list[str], int]:
        """The engine log's whole lines from byte `offset`, secrets masked, and where the next
        read starts (the agent ships the log to the panel with it)."""
        return read_lines(self.log_path, offset, max_bytes=max_bytes, secrets=self._secrets)

    # watchdog pauses -------------------------------------------------------------
    def pause_watchdog(self, reason: str = "paused by an operator") -> None:
        """Pause the watchdog until resume_watchdog(), across processes."""
        self.state.add_pause(reason, name="manual")

    def resume_watchdog(self) -> None:
        self.state.remove_pause(self.state.pauses / "manual.json")

    @contextlib.contextmanager
    def watchdog_paused(self, reason: str) -> Iterator[None]:
        """Pause the watchdog while the block runs; a crash of this process ends the pause."""
        path = self.state.add_pause(reason, holder_pid=os.getpid())
        try:
            yield
        finally:
            self.state.remove_pause(path)

    def watchdog_pauses(self) -> list[Pause]:
        return self.state.active_pauses()

    def forget_secrets(self) -> None:
        self._secrets.clear()


def _wait_port_free(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while listening_inodes(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
