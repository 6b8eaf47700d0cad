#!/usr/bin/env python3
"""Django's command-line utility for the control panel.

`python manage.py ...` and `./manage.py ...` work without activating the virtual environment:
when Django is not importable here and `./scripts/run` has created `.venv` next to this file,
the command runs again under `.venv/bin/python`."""

import importlib.util
import os
import sys
from pathlib import Path

VENV_PYTHON = Path(__file__).resolve().parent / ".venv" / "bin" / "python"
REEXEC_GUARD = "CONTROLPANEL_MANAGE_REEXEC"  # set once, so a broken venv fails instead of looping


def _through_venv() -> None:
    """Run again under the project's venv when this interpreter has no Django; or say what to do."""
    if importlib.util.find_spec("django") is not None:
        return
    if VENV_PYTHON.is_file() and os.access(VENV_PYTHON, os.X_OK) and not os.environ.get(REEXEC_GUARD):
        os.environ[REEXEC_GUARD] = "1"
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])  # noqa: S606
    sys.exit(
        f"Django is not installed for {sys.executable}. Run ./scripts/run once (it creates .venv and installs "
        f"the panel there); manage.py then uses {VENV_PYTHON} by itself."
    )


def main() -> None:
    _through_venv()
    if sys.argv[1:2] == ["agent"]:
        # A GPU host's agent: no database, no secret key of the panel's (controlpanel/settings_agent.py).
        os.environ["DJANGO_SETTINGS_MODULE"] = "controlpanel.settings_agent"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except Exception as exc:
        from core.errors import disk_full_command_message, is_disk_full, settings_data_dir

        if not is_disk_full(exc, folder=settings_data_dir()):
            raise
        sys.exit(disk_full_command_message(" ".join(sys.argv[1:2]), exc))  # one sentence, no traceback


if __name__ == "__main__":
    main()
