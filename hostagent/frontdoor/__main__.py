"""Run a front door without the agent or manage.py: for the bench and for trying it out.

    python -m hostagent.frontdoor --table table.json --commands commands.json \
        [--keys keys.json] [--budget ram=2GiB] [--bind 127.0.0.1:4000] [--log-dir DIR] [--stop-grace 10] \
        [--host-name gpu-box-1]

table.json is a routing table (table.py), keys.json a key table (keys.py), commands.json says how
to start each model: {"name": {"argv": [...], "health_url": "http://127.0.0.1:8001/health"}}.
With --budget, free memory is the budget less the planned bytes of the models running; without,
it is the host's available RAM under the device name "ram". Settings come from the environment
(CONTROLPANEL_FRONT_DOOR_*), --bind overrides the bind address; --host-name is the `host` label of
the engines' series on /metrics (default: this machine's short hostname). Ctrl-C stops the front door and
every engine it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import signal
from pathlib import Path

from .app import FrontDoor, serve
from .keys import KeyTable
from .launcher import Command, ProcessLoader, budget_free_memory
from .settings import FrontDoorSettings, parse_bind
from .table import RoutingTable

UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8GiB, 512MiB, 1000000)")
    return int(float(match.group(1)) * UNITS[match.group(2).lower()])


def parse_grace(text: str) -> float:
    """--stop-grace: seconds, finite and 0 or more (inf would never send SIGKILL)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"--stop-grace is a number of seconds, 0 or more, not {text!r}")
    return value


def parse_budget(text: str) -> tuple[str, int]:
    device, sep, size = text.partition("=")
    if not sep or not device:
        raise argparse.ArgumentTypeError(f"--budget is DEVICE=SIZE (e.g. gpu0=80GiB), not {text!r}")
    return device, parse_size(size)


def available_ram() -> dict[str, int]:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return {"ram": int(line.split()[1]) * 1024}
    return {"ram": 0}


async def main_async(args: argparse.Namespace) -> None:
    table = RoutingTable.from_json(Path(args.table).read_text())
    commands = {name: Command.from_dict(c) for name, c in json.loads(Path(args.commands).read_text()).items()}
    missing = [name for name in table.names() if name not in commands]
    if missing:
        raise SystemExit(f"no command for {', '.join(missing)} in {args.commands}")
    keys = KeyTable.from_json(Path(args.keys).read_text()) if args.keys else None
    settings = FrontDoorSettings.from_env(os.environ)
    if args.bind:
        host, port = parse_bind(args.bind)
        settings = dataclasses.replace(settings, host=host, port=port)
    if args.host_name:
        settings = dataclasses.replace(settings, host_name=args.host_name)
    loader = ProcessLoader(commands, log_dir=Path(args.log_dir) if args.log_dir else None, stop_grace=args.stop_grace)
    budget = dict(args.budget)
    free = (lambda: budget_free_memory(table, budget, loader)) if budget else available_ram

    def ready(door: FrontDoor) -> None:
        print(f"front door listening on {settings.host}:{door.port}", flush=True)

    task = asyncio.ensure_future(serve(table, loader, free, settings, keys=keys, ready=ready))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        await loader.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m hostagent.frontdoor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, help="routing table JSON")
    parser.add_argument("--commands", required=True, help="JSON: model name -> {argv, health_url}")
    parser.add_argument("--keys", help="key table JSON (default: no keys, open on the bind address)")
    parser.add_argument("--budget", type=parse_budget, action="append", default=[], help="DEVICE=SIZE, repeatable")
    parser.add_argument("--bind", help="HOST:PORT (default: CONTROLPANEL_FRONT_DOOR_BIND or 127.0.0.1:4000)")
    parser.add_argument("--host-name", help="the `host` label of the engines' series (default: this machine's name)")
    parser.add_argument("--log-dir", help="one log file per engine here (made if missing)")
    parser.add_argument(
        "--stop-grace", type=parse_grace, default=10.0,
        help="seconds a stopped engine has after SIGTERM before SIGKILL (default 10); an engine is stopped only "
        "once drained, with no stream open: 0 stops it hard at once, its memory freed sooner",
    )  # fmt: skip
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
