"""Who holds a TCP port, and is it an inference server the panel may stop?

The listening socket is found in /proc/net/tcp{,6} (state 0A = LISTEN); its inode is
matched against the socket links under /proc/<pid>/fd. A holder counts as an inference
server only if BOTH its command line looks like one (llama-server, vllm, sglang, ollama)
AND the port answers like one (/health, /v1/models, Ollama's banner). Anything else is
left alone and reported.

Even an inference server is stopped only when the host's policy says so:
CONTROLPANEL_STOP_STRAYS=never (the default) leaves every process the panel did not start
alone and refuses with who holds the port (it may be another panel's engine, mid-benchmark);
=engines lets a switch stop an inference server it finds on its port, and the operation's
log names it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import httpx

from .local_http import engine_client
from .processes import PROC, read_cmdline, read_stat

_LISTEN = "0A"

STOP_STRAYS_ENV = "CONTROLPANEL_STOP_STRAYS"
# Set in every engine's environment by the supervisor that starts it (its state folder), so an
# engine this panel started is known as ours even when its record was lost (a worker killed
# mid-start), and another panel's engine on the same machine is known as not ours.
ENGINE_OWNER_ENV = "CONTROLPANEL_ENGINE_OWNER"
STOP_STRAYS_POLICIES = ("never", "engines")


def stop_strays_policy(environ: dict[str, str] | None = None) -> str:
    """The host's policy for processes the panel did not start: "never" (default) or "engines".
    An unknown value reads as "never": a typo must not stop someone else's server."""
    value = (os.environ if environ is None else environ).get(STOP_STRAYS_ENV, "").strip().lower()
    return value if value in STOP_STRAYS_POLICIES else "never"


_ENGINE_CMDLINE = [
    re.compile(r"(^|/)llama-server$"),
    re.compile(r"(^|/)(vllm|sglang|ollama)$"),
    re.compile(r"^vllm\.entrypoints|^sglang\.launch_server$|^sglang$|^vllm$"),
    re.compile(r"^(vllm|sglang)::", re.IGNORECASE),  # process titles they set (setproctitle)
]


@dataclass(frozen=True)
class PortHolder:
    pid: int | None  # None: the socket's owner is not visible to this user
    cmdline: tuple[str, ...]
    engine_like_cmdline: bool
    engine_like_endpoint: str | None  # the URL that answered like an engine, if any
    owner: str | None = None  # ENGINE_OWNER_ENV in its environment: the state folder of the panel that started it

    @property
    def is_inference_server(self) -> bool:
        return self.pid is not None and self.engine_like_cmdline and self.engine_like_endpoint is not None

    def describe(self) -> str:
        if self.pid is None:
            return "a process this user cannot see"
        return f"pid {self.pid} ({' '.join(self.cmdline) or '?'})"


def listening_inodes(port: int) -> set[int]:
    """Inodes of sockets listening on `port` (any address, IPv4 and IPv6)."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / name).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state == _LISTEN and int(local.rsplit(":", 1)[1], 16) == port and inode:
                inodes.add(inode)
    return inodes


def pids_for_inodes(inodes: set[int]) -> list[int]:
    wanted = {f"socket:[{i}]" for i in inodes}
    found = []
    for proc_dir in PROC.iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            fds = list((proc_dir / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in wanted:
                    found.append(int(proc_dir.name))
                    break
            except OSError:
                continue
    return found


def engine_owner(pid: int) -> str | None:
    """The panel state folder that started `pid` (from its environment), or None."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    prefix = ENGINE_OWNER_ENV.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode("utf-8", "replace")
    return None


def looks_like_engine_cmdline(cmdline: list[str] | tuple[str, ...]) -> bool:
    """llama-server, `vllm serve`, `python -m vllm.entrypoints...`, sglang, `ollama serve`."""
    head = cmdline[:4]  # the program, or the interpreter and its -m module
    return any(p.search(arg) for arg in head for p in _ENGINE_CMDLINE)


def probe_engine_endpoint(host: str, port: int, *, timeout: float = 2.0) -> str | None:
    """The URL that answered like an inference server, or None."""
    base = f"http://{_connect_host(host)}:{port}"
    with engine_client(timeout) as client:
        for path in ("/health", "/v1/models", "/"):
            try:
                response = client.get(base + path)
            except httpx.HTTPError:
                continue
            if _engine_like(path, response):
                return base + path
    return None


def _engine_like(path: str, response: httpx.Response) -> bool:
    if path == "/health":
        # vLLM: 200 empty body; llama.cpp: 200 {"status":"ok"} or 503 "Loading model";
        # SGLang: 200. A generic web server answers 404 here.
        return response.status_code in (200, 503) and (response.status_code == 200 or "model" in response.text.lower())
    if path == "/v1/models":
        try:
            body = response.json()
        except ValueError:
            return False
        return response.status_code == 200 and isinstance(body, dict) and isinstance(body.get("data"), list)
    return response.status_code == 200 and "ollama is running" in response.text.lower()


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host  # noqa: S104


def find_port_holder(port: int, *, host: str = "127.0.0.1", probe: bool = True) -> PortHolder | None:
    """Who listens on `port`, classified; None if nobody does."""
    inodes = listening_inodes(port)
    if not inodes:
        return None
    pids = pids_for_inodes(inodes)
    if not pids:
        return PortHolder(None, (), False, None)
    # Prefer the topmost process that holds the socket (forked workers inherit it).
    pid = min(pids, key=lambda p: _depth(p, set(pids)))
    cmdline = tuple(read_cmdline(pid))
    engine_cmd = looks_like_engine_cmdline(cmdline)
    endpoint = probe_engine_endpoint(host, port) if (probe and engine_cmd) else None
    return PortHolder(pid, cmdline, engine_cmd, endpoint, engine_owner(pid))


def _depth(pid: int, holders: set[int]) -> int:
    depth, current = 0, pid
    while True:
        stat = read_stat(current)
        if stat is None or stat.ppid not in holders:
            return depth
        depth, current = depth + 1, stat.ppid


def port_is_free(port: int) -> bool:
    return not listening_inodes(port)
