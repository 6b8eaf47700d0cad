"""What does the lab router add on top of a host's front door?

A real llama-server (Gemma 3 270M, or with `--stub-delay-ms` bench/streaming_stub.py) behind a
front door in its own process (bench_frontdoor.front_door), the panel's database in a folder of
its own (the embedded default's SQLite: migrated, this machine registered as the host, a revision
the door serves as `bench`, the door's report), and `manage.py router` in its own process reading
its route table from that database, as a lab runs it. The panel's load generator runs the same
levels straight at the front door and through the router, alternating `--rounds` times a side so
the machine's drift falls on both: time to first token p50/p99, decode tokens/s per stream, and the
router's CPU seconds against the upstream's (from /proc).

    .venv/bin/python bench/bench_router.py [--short] [--threads 1] [--rounds 3] [--concurrency 1 64]
    .venv/bin/python bench/bench_router.py --stub-delay-ms 10   # the router's own cost, no engine
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_frontdoor import (  # noqa: E402
    ENGINE,
    MIB,
    add_load_arguments,
    add_upstream_arguments,
    compare_levels,
    entry,
    front_door,
    parse_load_arguments,
    upstream_argv,
)
from hostagent.runtime.loadgen import Target  # noqa: E402
from tests.support.llama import free_port, gemma_model_path  # noqa: E402

# The panel's facts, written as an operator and the host's agent would (services, not rows by hand).
SETUP = """
from django.utils import timezone
from deployments.models import ModelVariant
from deployments.services.aliases import alias_set
from deployments.services.front_door import front_door_report
from deployments.runtime_bridge import spec_for_values
from deployments.services.revisions import revision_create, revision_mark_active
from hardware.models import Host
from hostagent.probe import local_host_name
host = Host.objects.get(name=local_host_name())
variant = ModelVariant.objects.create(name="bench-gemma", format="gguf", gguf_file={model!r})
spec = spec_for_values(engine="llama.cpp", engine_version="", model=variant, served_name="gemma", port={port},
    knobs={{"ctx_size": 1024, "parallel": 1, "n_gpu_layers": 0}}, env={{}})
revision = revision_create(host=host, spec=spec, message="bench", actor=None)
revision_mark_active(revision=revision, actor=None)
alias_set(host=host, name="bench", revision=revision, actor=None)
front_door_report(host=host, version="bench", bind="127.0.0.1:{door_port}", usage=[],
    state=[{{"name": "gemma-r1", "phase": "loaded"}}])
Host.objects.filter(pk=host.pk).update(last_heartbeat=timezone.now())  # its agent's heartbeat
"""


def panel_env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    return env | {"CONTROLPANEL_DATA_DIR": str(folder), "DJANGO_SETTINGS_MODULE": "controlpanel.settings"}


def manage(env: dict[str, str], *args: str) -> None:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"manage.py {args[0]} failed:\n{done.stderr[-2000:]}")


@contextmanager
def lab_router(engine_port: int, door_port: int) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`manage.py router` on a panel database that says this machine's door serves `bench`."""
    folder = Path(tempfile.mkdtemp(prefix="bench-router-"))
    model = ENGINE["model"] or gemma_model_path()
    env = panel_env(folder) | {"CONTROLPANEL_MODEL_DIRS": str(Path(model).parent)}
    manage(env, "migrate", "--noinput", "-v0")
    manage(env, "host", "register-local")
    manage(env, "shell", "-c", SETUP.format(port=engine_port, door_port=door_port, model=model))
    port = free_port()
    env |= {
        "CONTROLPANEL_ROUTER_BIND": f"127.0.0.1:{port}",
        # The bench outlasts the report and heartbeat it wrote once: the door stays usable.
        "CONTROLPANEL_ROUTER_STALE_S": "86400",
        "CONTROLPANEL_HOST_OFFLINE_AFTER_S": "86400",
    }
    with (folder / "router.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "manage.py", "router"], cwd=ROOT, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _usable(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the router did not come up:\n{(folder / 'router.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield proc, url
    finally:
        proc.terminate()
        proc.wait(30)


def _usable(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).json().get("usable") == 1
    except (httpx.HTTPError, ValueError):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_arguments(parser)
    add_upstream_arguments(parser)
    args = parse_load_arguments(parser)
    port = free_port()
    argv, context, what = upstream_argv(args, port)
    model = {**entry("gemma-r1", port, mode="pinned"), "aliases": ["bench"], "upstream_model": "gemma"}
    print(f"{os.cpu_count()} cores; {what}")
    with front_door([model], {"gemma-r1": argv}, budget=1024 * MIB) as door:
        door.wait_phase("gemma-r1", "loaded")
        with lab_router(port, int(door.url.rsplit(":", 1)[1])) as (router, url):
            direct = Target(chat_url=f"{door.url}/v1/chat/completions", model="bench")
            through = Target(chat_url=f"{url}/v1/chat/completions", model="bench")
            print("straight to the front door vs through the lab router (in front of the same door)")
            compare_levels(args, direct, through, (router.pid, door.engine_pid("gemma-r1")), context, "router")


if __name__ == "__main__":
    main()
