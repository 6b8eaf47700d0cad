"""Where the real tools the export tests hand our files to are installed, or why they are not.

`./scripts/test` installs each into its own folder under `.tools/` (git-ignored) from the
registries: hermes-agent, aider-chat and ansible-core from PyPI, each in its own venv (their
pins clash with the panel's), opencode, Claude Code and Codex from npm (`opencode-ai`,
`@anthropic-ai/claude-code`, `@openai/codex`, each shipping its binary), and Debian's systemd
for `systemd-analyze` and strace. A tool missing here makes its test skip with the
reason, so a machine that could not install it still runs everything else.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools"


def tool_python(name: str) -> Path:
    """The Python of the venv `.tools/<name>` holding that PyPI tool, or a skip saying so."""
    python = TOOLS / name / "bin" / "python"
    marker = TOOLS / name / ".installed"
    if not python.is_file() or not marker.is_file():
        pytest.skip(f"{name} is not installed in .tools/{name} (./scripts/test installs it from PyPI; see its log)")
    return python


def tool_bin(name: str, executable: str) -> Path:
    """An executable of a PyPI tool's venv (e.g. ansible-playbook), or a skip."""
    exe = tool_python(name).parent / executable
    if not exe.is_file():
        pytest.skip(f"{name} in .tools/{name} has no {executable}")
    return exe


def npm_bin(folder: str, executable: str, package: str) -> Path:
    """An npm tool's executable in `.tools/<folder>`, or a skip saying so."""
    exe = TOOLS / folder / "node_modules" / ".bin" / executable
    if not exe.exists() or not (TOOLS / folder / ".installed").is_file():
        pytest.skip(f"{executable} is not installed in .tools/{folder} (./scripts/install-tools installs {package})")
    return exe


def opencode_bin() -> Path:
    return npm_bin("opencode", "opencode", "opencode-ai")


def claude_bin() -> Path:
    return npm_bin("claude-code", "claude", "@anthropic-ai/claude-code")


def codex_bin() -> Path:
    return npm_bin("codex", "codex", "@openai/codex")


def strace() -> str:
    found = shutil.which("strace")
    if found is None:
        pytest.skip("strace is not installed (./scripts/install-tools installs Debian's strace package)")
    return found


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed (./scripts/test installs Debian's systemd package)")
    return found


def isolated_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A real tool's environment: its own empty home and XDG folders under `tmp_path` (no config,
    cache or key of this machine's user reaches it), PATH and a locale, and `extra`."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "LANG": "C.UTF-8",
        **extra,
    }
