#!/usr/bin/env python
"""Django's command-line utility for the control panel."""

import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["agent"]:
        # A GPU host's agent: no database, no secret key of the panel's (controlpanel/settings_agent.py).
        os.environ["DJANGO_SETTINGS_MODULE"] = "controlpanel.settings_agent"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
