"""What the agent's front door costs to start, and what loading a revision through the agent
costs against the engine's own load, with the real llama-server and Gemma 3 270M.

1. Door start: FrontDoorService.start() (stop leftovers, read the kept table, listen) with no
   table, then with a kept table of one on-demand revision.
2. Cold start: the engine's own load (the same argv the agent's launch makes, process start to a
   healthy /health) plus a warm request's first token, against the first token through the door
   for an unloaded on-demand revision (the agent's preflight, supervisor start and health gate,
   then the request), medians of `--rounds`. The door's own `last_load_s` is the loader's part.

    .venv/bin/python bench/bench_agent_door.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings_agent")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import django

    django.setup()
    import httpx

    from bench.bench_frontdoor import first_token_ms
    from bench.bench_loadgen import wait_healthy
    from hostagent.context import AgentContext
    from hostagent.door.service import FrontDoorService
    from hostagent.frontdoor import FrontDoorSettings
    from hostagent.launch import launch_spec
    from hostagent.panel import HttpPanel
    from hostagent.runtime.supervisor import Supervisor
    from tests.support.llama import free_port, gemma_launch, gemma_model_path

    state = Path(tempfile.mkdtemp(prefix="bench-door-"))
    os.environ["CONTROLPANEL_MODEL_DIRS"] = str(Path(gemma_model_path()).parent)
    panel = HttpPanel(f"http://127.0.0.1:{free_port()}", "cph_bench", outbox_dir=state / "outbox", timeout=2)
    ctx = AgentContext(host="bench", panel=panel, supervisor=Supervisor(state / "host"))
    settings = FrontDoorSettings(host="127.0.0.1", port=0, memory_settle_s=2)

    def door() -> tuple[FrontDoorService, float]:
        service = FrontDoorService(ctx, settings, gpus=False, state=state, interval=5.0, ready_timeout=300)
        started = time.perf_counter()
        service.start()
        return service, (time.perf_counter() - started) * 1000

    launch = gemma_launch(2, ctx=1024, port=free_port())
    entry = {
        "name": "cold",
        "upstream_model": "gemma-r2",
        "mode": "on-demand",
        "idle_ttl_s": 0.5,
        "memory": {"ram": 300 << 20},
        "revision": 2,
        "launch": launch,
    }
    answer = {"version": "1", "door": {}, "models": [entry], "keys": {"keys": []}}

    empty_service, empty_ms = door()
    empty_service.apply(answer)  # kept on disk for the next start
    empty_service.close()
    service, kept_ms = door()
    print(f"1. door start: {empty_ms:.0f} ms with no table, {kept_ms:.0f} ms with a kept table of one revision")

    spec = launch_spec(launch)
    base = spec.models_url.removesuffix("/v1/models")
    url = f"http://{service.bind}"
    own: list[tuple[float, float]] = []
    through: list[float] = []
    loads: list[float] = []

    def phase() -> dict[str, Any]:
        row: dict[str, Any] = httpx.get(f"{url}/frontdoor/state", timeout=10).json()["models"][0]
        return row

    try:
        for _ in range(args.rounds):  # alternating, so the machine's drift falls on both sides
            deadline = time.monotonic() + 120
            while phase()["phase"] != "unloaded":  # the door's engine listens on the same port
                assert time.monotonic() < deadline, "the revision never unloaded"
                time.sleep(0.05)
            started = time.perf_counter()
            engine = subprocess.Popen(
                list(spec.argv), env={**os.environ, **spec.env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                wait_healthy(spec.health_url, timeout=300, poll=0.02)
                own.append(((time.perf_counter() - started) * 1000, first_token_ms(base, "gemma-r2")))
            finally:
                engine.terminate()
                engine.wait(timeout=60)
            through.append(first_token_ms(url, "cold"))
            loads.append(phase()["last_load_s"] * 1000)
    finally:
        service.close()
    load, warm, cold = (statistics.median(x) for x in ([a for a, _ in own], [b for _, b in own], through))
    agent = statistics.median(loads)
    print(
        f"2. cold start (median of {args.rounds}): engine's own load {load:.0f} ms + warm first token {warm:.0f} ms "
        f"= {load + warm:.0f} ms; through the agent's door, revision unloaded: {cold:.0f} ms "
        f"({cold - load - warm:+.0f} ms); the agent's load (preflight, supervisor start, health gate) {agent:.0f} ms"
    )


if __name__ == "__main__":
    main()
