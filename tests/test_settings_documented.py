"""Every setting the code reads from the environment is in the configuration reference (the
README's tables; issue 25): a new `CONTROLPANEL_*` read with no row fails here, naming it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("controlpanel", "core", "deployments", "hardware", "hostagent", "notifications", "api")
# django-environ reads in the settings modules, and plain process-environment reads anywhere.
SETTINGS_READ = re.compile(r"\b(?:env(?:\.[a-z]+)?|env_number|env_list|env_seconds)\(\s*\"([A-Z][A-Z0-9_]+)\"")
PROCESS_READ = re.compile(
    r"\b(?:os\.environ\.get|os\.environ\.pop|os\.environ\[|os\.getenv|environ\.get|environ\[)\(?\s*\"([A-Z][A-Z0-9_]+)\""
)
# Read from the environment but not ours to document: the platform's and the tools' own.
NOT_OURS = {"DJANGO_SETTINGS_MODULE", "HOME", "PATH", "USER", "SUDO_USER", "PYTHONPATH", "TMPDIR"}


def names_read() -> set[str]:
    found: set[str] = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            text = path.read_text(encoding="utf-8")
            if path.parent.name == "controlpanel" and path.name.startswith("settings"):
                found |= set(SETTINGS_READ.findall(text))
            found |= set(PROCESS_READ.findall(text))
    return found - NOT_OURS


def reference() -> str:
    """The README and, once the manual moves there, docs/*.md."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


def test_every_setting_read_from_the_environment_is_documented() -> None:
    names = names_read()
    assert {"DATABASE_URL", "CONTROLPANEL_ENGINE_BIND_HOST", "CONTROLPANEL_MODEL_DIRS"} <= names, sorted(names)
    text = reference()
    missing = sorted(name for name in names if f"`{name}`" not in text)
    assert not missing, "settings read from the environment but missing from the README's tables: " + ", ".join(missing)
