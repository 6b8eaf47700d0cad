"""Every setting the code reads from the environment is in the configuration reference,
docs/configuration.md, in backticks (issue 25): a new setting with no row there fails here,
naming it. Other pages may mention a setting; only the reference counts.

A setting is:
- a name the settings modules read through django-environ (`env.int("X")`, `env_number("X", ...)`);
- any string literal in the apps that is a whole `CONTROLPANEL_*` name (the agent's runtime reads
  its settings through constants and helpers, e.g. `RESERVE_ENV = "..."`);
- a name the apps or the example read from `os.environ` directly (`os.environ.get("HF_ENDPOINT")`),
  or keep in a `..._ENV = "NAME"` constant;
- a `${NAME}` the scripts and docker-compose expand."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "configuration.md"
APPS = (
    "controlpanel",
    "core",
    "people",
    "serving",
    "deployments",
    "hardware",
    "hostagent",
    "notifications",
    "changes",
    "schedules",
    "rollouts",
    "dashboard",
    "api",
    "labrouter",
    "embedded",
    "examples",
)
SHELL_FILES = ("scripts/run", "scripts/test", "scripts/venv-install", "scripts/install-tools", ".ci/run")
COMPOSE_FILES = ("docker-compose.yml", "Dockerfile")
SETTINGS_READ = re.compile(r"\b(?:env(?:\.[a-z]+)?|env_number|env_list|env_seconds)\(\s*\"([A-Z][A-Z0-9_]+)\"")
OUR_NAME = re.compile(r"[rbuf]*[\"'](CONTROLPANEL_[A-Z0-9_]+)[\"']")
ENVIRON_READ = re.compile(r"\b(?:environ(?:\.get)?|getenv)\s*[(\[]\s*[\"']([A-Z][A-Z0-9_]+)[\"']")
ENV_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*_ENV\s*(?::\s*\w+\s*)?=\s*[\"']([A-Z][A-Z0-9_]+)[\"']", re.MULTILINE)
SHELL_EXPANSION = re.compile(r"\$\{([A-Z][A-Z0-9_]*)")
# Ours but no setting: the marker the supervisor sets in each engine's environment (strays.py).
NOT_SETTINGS = {"CONTROLPANEL_ENGINE_OWNER"}


def names_in_python(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    found = set(ENVIRON_READ.findall(text)) | set(ENV_CONSTANT.findall(text))
    if path.parent.name == "controlpanel" and path.name.startswith("settings"):
        found |= set(SETTINGS_READ.findall(text))
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        match = OUR_NAME.fullmatch(token.string) if token.type == tokenize.STRING else None
        if match:
            found.add(match.group(1))
    return found


def names_read() -> set[str]:
    found: set[str] = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" not in path.parts:
                found |= names_in_python(path)
    for name in (*SHELL_FILES, *COMPOSE_FILES):
        found |= set(SHELL_EXPANSION.findall((ROOT / name).read_text(encoding="utf-8")))
    return found - NOT_SETTINGS


def undocumented(names: set[str], reference: str) -> list[str]:
    return sorted(name for name in names if f"`{name}`" not in reference)


def test_every_setting_read_from_the_environment_is_documented() -> None:
    names = names_read()
    # The scan finds reads of each kind: django-environ, a helper's argument, a module constant,
    # os.environ, a `..._ENV` constant that is no CONTROLPANEL_ name, the scripts, docker-compose.
    assert {
        "DATABASE_URL",
        "CONTROLPANEL_MODEL_DIRS",
        "CONTROLPANEL_DOWNLOAD_RESERVE_BYTES",
        "HF_ENDPOINT",
        "OLLAMA_HOST",
        "PANEL_BIND",
        "REDIS_PASSWORD",
    } <= names
    missing = undocumented(names, REFERENCE.read_text(encoding="utf-8"))
    assert not missing, "settings read from the environment but missing from docs/configuration.md: " + ", ".join(
        missing
    )


def test_a_setting_missing_from_the_reference_is_named(tmp_path) -> None:
    """The check fails on the reference without one row, and names what is missing; a mention
    elsewhere (the README, another page) does not make up for it."""
    reference = REFERENCE.read_text(encoding="utf-8")
    without = "\n".join(line for line in reference.splitlines() if "`CONTROLPANEL_ENGINE_BIND_HOST`" not in line)
    assert undocumented(names_read(), without) == ["CONTROLPANEL_ENGINE_BIND_HOST"]
    assert "`CONTROLPANEL_ENGINE_BIND_HOST`" in (ROOT / "docs" / "gpu-hosts.md").read_text(encoding="utf-8")


def test_the_scan_reads_each_kind_of_read(tmp_path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        'import os\nSTATE_ENV = "MY_STATE"\nx = os.environ.get("MY_URL")\ny = os.environ["MY_KEY"]\n'
        'z = os.getenv("MY_DIR")\nw = "CONTROLPANEL_MY_THING"\nv = "not CONTROLPANEL_A sentence"\n'
    )
    assert names_in_python(module) == {"MY_STATE", "MY_URL", "MY_KEY", "MY_DIR", "CONTROLPANEL_MY_THING"}
