"""What a person would run by hand: the start script, the systemd unit, install steps.

Rendered from a LaunchSpec with every secret value masked, so the text can be shown on
a page, stored in history or diffed. The unit mirrors the seed's Ansible role
(shared/reference/ansible-vars.md): TimeoutStartSec=600, TimeoutStopSec=120,
KillMode=mixed, OOMScoreAdjust=-100, unlimited memlock, no start-rate limit,
Restart=on-failure, RestartSec=10, output appended to a log file. Pure: no I/O.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from deployments.engines.base import EngineConfig, LaunchSpec

LOG_NAMES = {"vllm": "vllm", "llama.cpp": "llama-server", "ollama": "ollama", "sglang": "sglang"}


@dataclass(frozen=True)
class InstallStep:
    """One command of an install plan: argv (never a shell string), extra env, purpose."""

    argv: tuple[str, ...]
    description: str
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def as_argv(self) -> list[str]:
        """The step as one argv list; env is carried by an `env K=V` prefix."""
        prefix = ["env", *(f"{k}={v}" for k, v in self.env.items())] if self.env else []
        return [*prefix, *self.argv]


def _argv_lines(argv: list[str]) -> list[str]:
    """Group `--flag value` pairs on one line each, quoted with shlex."""
    lines: list[str] = []
    i = 0
    head = [shlex.quote(a) for a in argv[:1]]
    i = 1
    while i < len(argv) and not argv[i].startswith("-"):
        head.append(shlex.quote(argv[i]))
        i += 1
    lines.append(" ".join(head))
    while i < len(argv):
        token = argv[i]
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            lines.append(f"{shlex.quote(token)} {shlex.quote(argv[i + 1])}")
            i += 2
        else:
            lines.append(shlex.quote(token))
            i += 1
    return lines


def render_start_script(spec: LaunchSpec) -> str:
    """A bash script that exports the env and `exec`s the argv (secrets masked)."""
    out = [
        "#!/usr/bin/env bash",
        f"# {spec.engine}: serves {spec.served_name!r} on {spec.host}:{spec.port}",
        f"# health: {spec.health_url}",
        "set -euo pipefail",
    ]
    for key, value in sorted(spec.masked_env().items()):
        out.append(f"export {key}={shlex.quote(value)}")
    if spec.cwd:
        out.append(f"cd {shlex.quote(spec.cwd)}")
    lines = _argv_lines(spec.masked_argv())
    out.append("exec " + " \\\n    ".join(lines))
    return "\n".join(out) + "\n"


def _systemd_quote(value: str, *, always: bool = False) -> str:
    """Quote one word for ExecStart=/Environment= (systemd.service(5) "Command lines"):
    `%` specifiers doubled, `$` doubled so systemd does not expand variables, and double
    quotes with backslash escapes around words that need them."""
    escaped = value.replace("%", "%%").replace("$", "$$")
    if not always and re.fullmatch(r"[A-Za-z0-9_@%+=:,./$-]+", escaped):
        return escaped
    escaped = escaped.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def render_systemd_unit(spec: LaunchSpec, *, user: str = "llm", log_dir: str = "/var/log/llm") -> str:
    """A systemd unit that runs the same argv and env (secrets masked)."""
    log_file = f"{log_dir.rstrip('/')}/{LOG_NAMES.get(spec.engine, 'engine')}.log"
    service = [
        "[Unit]",
        f"Description={spec.engine} inference server ({spec.served_name} on port {spec.port})",
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=simple",
        f"User={user}",
    ]
    if spec.cwd:
        service.append(f"WorkingDirectory={spec.cwd}")
    for key, value in sorted(spec.masked_env().items()):
        env_word = _systemd_quote(f"{key}={value}", always=True).replace("$$", "$")  # no $ expansion here
        service.append(f"Environment={env_word}")
    service += [
        "ExecStart=" + " ".join(_systemd_quote(a) for a in spec.masked_argv()),
        "Restart=on-failure",
        "RestartSec=10",
        "TimeoutStartSec=600",
        "TimeoutStopSec=120",
        "KillMode=mixed",
        "OOMScoreAdjust=-100",
        "LimitMEMLOCK=infinity",
        f"StandardOutput=append:{log_file}",
        f"StandardError=append:{log_file}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(service) + "\n"


class ScriptsMixin:
    """start_script/systemd_unit for any adapter that has `launch_spec(config)`."""

    def launch_spec(self, config: EngineConfig) -> LaunchSpec:  # pragma: no cover - overridden
        raise NotImplementedError

    def start_script(self, config: EngineConfig) -> str:
        return render_start_script(self.launch_spec(config))

    def systemd_unit(self, config: EngineConfig, *, user: str = "llm", log_dir: str = "/var/log/llm") -> str:
        return render_systemd_unit(self.launch_spec(config), user=user, log_dir=log_dir)
