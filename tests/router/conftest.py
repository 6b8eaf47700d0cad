"""Two hosts of a lab, as the lab router sees them: real front doors (`python -m
hostagent.frontdoor`, each in its own process, listening on every interface), each in front of a
real llama-server serving the shipped Gemma 3 270M under its own name (`gemma-a`, `gemma-b`), so
an answer says which host's engine wrote it; its /metrics on, re-exported by the door under the
host's name. What each door serves and its keys are the panel's
own document for its host (services.front_door.front_door_document, what the agent gets); its
report is the door's own /frontdoor/state, recorded as the agent API records it. The router is
`manage.py router` in its own process on the test database.

Both hosts' address is this machine's non-loopback address: two hosts of a lab that the router
reaches as other machines, though both are this one.

    lab-a: gemma-a-r1, aliases `chat` and `coder`
    lab-b: gemma-b-r1, aliases `chat` and `fast`
    keys:  `all` (every model), `only-fast` (`fast` only)
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from bench.bench_frontdoor import FrontDoorProcess, engine_argv, front_door
from deployments.models import ModelVariant
from deployments.services.aliases import alias_set
from deployments.services.front_door import front_door_document, front_door_report
from deployments.services.inference_keys import key_create
from deployments.services.revisions import revision_mark_active
from hardware.models import Host
from hostagent.door.tables import serving_set
from tests.hardware.factories import HostFactory
from tests.support.llama import GEMMA_PURPOSE, free_port, gemma_model_path
from tests.support.panel import ROOT, test_database_url
from tests.support.revisions import make_revision


def lab_address() -> str:
    """This machine's address on its network (a UDP socket's route: nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("192.0.2.1", 9))
        address = str(sock.getsockname()[0])
    assert not address.startswith("127."), "the router tests need a non-loopback address on this machine"
    return address


@dataclass
class Lab:
    router: str  # the router's root URL
    keys: dict[str, str]  # key name -> its secret
    doors: dict[str, FrontDoorProcess] = field(default_factory=dict)  # host name -> its front door
    log: Path | None = None

    def router_log(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log else ""


def active_tiny_revision(host: Host, operator: User, alias: str) -> Any:
    """A llama.cpp revision of a 1 GiB GGUF in /models, the host's active one, known as `alias`
    (for tests that need the panel's facts and no engine)."""
    variant = ModelVariant.objects.create(
        name=f"tiny-{host.name}", format="gguf", gguf_file="/models/tiny.gguf", weights_bytes=1 << 30,
        arch={"num_layers": 18},
    )  # fmt: skip
    revision = make_revision(
        host=host, engine="llama.cpp", model_variant=variant, served_name="tiny", port=8001,
        knobs={"ctx_size": 4096, "parallel": 1, "n_gpu_layers": 0}, message="r1", actor=operator,
    )  # fmt: skip
    revision_mark_active(revision=revision, actor=operator)
    alias_set(host=host, name=alias, revision=revision, actor=operator)
    return revision


def report(host: Host, door: FrontDoorProcess, version: str) -> None:
    """What the host's agent would send: the door's bind and state."""
    port = door.url.rsplit(":", 1)[1]
    state = list(door.state().values())
    front_door_report(host=host, version=version, bind=f"0.0.0.0:{port}", state=state, usage=[])  # noqa: S104


@contextlib.contextmanager
def router_process(log: Path, usable: int = 2, **env: str) -> Iterator[str]:
    """The router on the test database, once it can use `usable` doors."""
    port = free_port()
    environ = dict(os.environ, DATABASE_URL=test_database_url(), DJANGO_SETTINGS_MODULE="controlpanel.settings")
    environ.update(
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        CONTROLPANEL_ROUTER_BIND=f"127.0.0.1:{port}",
        CONTROLPANEL_ROUTER_REFRESH_S="0.3",
        CONTROLPANEL_ROUTER_STALE_S="600",  # the doors report once, at the start
        **env,
    )
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "router"], cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).json().get("usable") == usable:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture
def two_hosts(operator: User, admin_user: User, tmp_path: Path) -> Iterator[Lab]:
    model = gemma_model_path()
    variant = ModelVariant.objects.create(
        name="gemma-3-270m", format="gguf", gguf_file=model, quantization="Q4_K_M", purpose=GEMMA_PURPOSE,
        arch={"architecture": "gemma3", "num_layers": 18},
    )  # fmt: skip
    address = lab_address()
    keys = {name: key_create(name=name, models=models, actor=admin_user)[1] for name, models in
            (("all", None), ("only-fast", "fast"))}  # fmt: skip
    with contextlib.ExitStack() as stack:
        doors = {}
        for host_name, served, alias in (("lab-a", "gemma-a", "coder"), ("lab-b", "gemma-b", "fast")):
            host = HostFactory(name=host_name, address=address, model_dirs=[str(Path(model).parent)])
            revision = make_revision(
                host=host, engine="llama.cpp", model_variant=variant, served_name=served, port=free_port(),
                knobs={"ctx_size": 1024, "parallel": 2, "n_gpu_layers": 0, "threads": 1},
                message="the lab's model", actor=operator,
            )  # fmt: skip
            revision_mark_active(revision=revision, actor=operator)
            for name in ("chat", alias):
                alias_set(host=host, name=name, revision=revision, actor=operator)
            document = front_door_document(host).to_dict()
            # The routing table the host's agent makes of the panel's document (hostagent.door.tables).
            table = serving_set(document, bind_host="127.0.0.1").table.to_dict()["models"]
            argv = [*engine_argv(revision.port, context=1024, slots=2, threads=1, name=served), "--metrics"]
            door = stack.enter_context(
                front_door(
                    table, {table[0]["name"]: argv}, 64 << 30, keys=document["keys"], bind_host="0.0.0.0",  # noqa: S104
                    extra=("--host-name", host_name),
                )
            )  # fmt: skip
            door.wait_phase(table[0]["name"], "loaded", timeout=120)
            report(host, door, document["version"])
            doors[host_name] = door
        Host.objects.filter(name__in=doors).update(last_heartbeat=timezone.now())  # both agents are alive
        log = tmp_path / "router.log"
        router = stack.enter_context(router_process(log))
        yield Lab(router, keys, doors, log)
