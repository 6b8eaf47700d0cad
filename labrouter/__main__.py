"""`python -m labrouter [--bind HOST:PORT]`: the lab router, as `manage.py router` runs it."""

from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m labrouter", description=__doc__.split(":")[1].strip())
    parser.add_argument("--bind", help="HOST:PORT (default: CONTROLPANEL_ROUTER_BIND, 127.0.0.1:4100)")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
    import django

    django.setup()
    from .run import serve_forever

    serve_forever(args.bind)


if __name__ == "__main__":
    main()
