"""Every setting the code reads from the environment is in the configuration reference (the
README's tables and, once the manual moves there, docs/*.md; issue 25): a new setting with no row
fails here, naming it.

A setting is a name the settings modules read through django-environ (`env.int("X")`,
`env_number("X", ...)`), or any string literal in the apps that is a whole `CONTROLPANEL_*` name
(the agent's runtime reads its settings through constants and helpers, e.g. `RESERVE_ENV = "..."`)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("controlpanel", "core", "deployments", "hardware", "hostagent", "notifications", "api")
SETTINGS_READ = re.compile(r"\b(?:env(?:\.[a-z]+)?|env_number|env_list|env_seconds)\(\s*\"([A-Z][A-Z0-9_]+)\"")
OUR_NAME = re.compile(r"[rbuf]*[\"'](CONTROLPANEL_[A-Z0-9_]+)[\"']")
# Ours but no setting: the marker the supervisor sets in each engine's environment (strays.py).
NOT_SETTINGS = {"CONTROLPANEL_ENGINE_OWNER"}


def names_read() -> set[str]:
    found: set[str] = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            text = path.read_text(encoding="utf-8")
            if path.parent.name == "controlpanel" and path.name.startswith("settings"):
                found |= set(SETTINGS_READ.findall(text))
            for token in tokenize.generate_tokens(io.StringIO(text).readline):
                match = OUR_NAME.fullmatch(token.string) if token.type == tokenize.STRING else None
                if match:
                    found.add(match.group(1))
    return found - NOT_SETTINGS


def reference() -> str:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


def test_every_setting_read_from_the_environment_is_documented() -> None:
    names = names_read()
    # The scan finds reads of each kind: django-environ, a helper's argument, a module constant.
    assert {"DATABASE_URL", "CONTROLPANEL_MODEL_DIRS", "CONTROLPANEL_DOWNLOAD_RESERVE_BYTES"} <= names
    text = reference()
    missing = sorted(name for name in names if f"`{name}`" not in text)
    assert not missing, "settings read from the environment but missing from the README's tables: " + ", ".join(missing)
