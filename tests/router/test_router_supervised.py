"""The embedded supervisor and the lab router: a router that cannot listen (its address is taken)
is not restarted, and the panel runs on without it, saying so loudly."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from typing import Any

from embedded.panel import Child, Panel
from labrouter.run import CANNOT_LISTEN


def test_a_router_whose_address_is_taken_stops_alone_and_the_panel_runs_on(tmp_path: Path, settings: Any) -> None:
    settings.DATA_DIR = tmp_path
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bind = f"127.0.0.1:{taken.getsockname()[1]}"
        panel = Panel("127.0.0.1:8000")
        router = next(child for child in panel.children if child.name == "router")
        router.argv = [*router.argv, "--bind", bind]
        sleeper = Child("worker", [sys.executable, "-c", "import time; time.sleep(60)"], panel.log_dir)
        panel.children = [sleeper, router]
        for child in panel.children:
            panel.start(child)
        try:
            deadline = time.monotonic() + 60
            while router.proc is not None and router.proc.returncode is None and time.monotonic() < deadline:
                assert panel._tick()
                time.sleep(0.2)
            for _ in range(10):  # a few more rounds: still running, the router not started again
                assert panel._tick()
                time.sleep(0.1)
            assert router.proc is not None and router.proc.returncode == CANNOT_LISTEN
            assert not router.restarts and sleeper.pid is not None
            said = (panel.log_dir / "embedded.log").read_text()
            assert "router" in said and "cannot run (exit 78); the panel runs on without it" in said
            assert f"cannot listen on {bind}" in said
        finally:
            panel.stop_all()
