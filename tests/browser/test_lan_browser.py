"""Issue 41: one setting serves the box to its LAN. From a fresh data folder, the panel starts with
CONTROLPANEL_LAN_ADDRESS on the host's end of a veth pair this test makes (a network namespace of
its own, private addresses it picks in 10.213.7.0/24, removed afterwards); then, from inside that
namespace as a laptop on the LAN would: Chromium signs in to the panel and reads exports that name
the LAN address with no loopback warning, and curl reaches the front door by alias with a key, and
the lab router. Nothing else is set: the panel's bind, the allowed hosts, the engines', the door's
and the router's binds and this host's address all follow the one setting."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.chromium import ARGS, CHROMIUM
from tests.support.embedded import ADMIN, ROOT, EmbeddedPanel, embedded_env, prepare
from tests.support.llama import free_port, gemma_model_path

pytestmark = [pytest.mark.browser, pytest.mark.engine, pytest.mark.celery]

# What the panel's machine has set that this test must not inherit: the six settings it replaces.
REPLACED = (
    "PANEL_BIND",
    "DJANGO_ALLOWED_HOSTS",
    "CONTROLPANEL_ENGINE_BIND_HOST",
    "CONTROLPANEL_FRONT_DOOR_BIND",
    "CONTROLPANEL_ROUTER_BIND",
    "CONTROLPANEL_URL",
)

SERVE = """
import json, time
from deployments.models import ModelVariant
from deployments.services.aliases import alias_set
from deployments.services.inference_keys import key_create
from deployments.runtime_bridge import spec_for_values
from deployments.services.revisions import revision_create
from deployments.services.switch import switch_request
from hardware.models import Host
host = Host.objects.get()
model = ModelVariant.objects.create(name="gemma-lan", format="gguf", gguf_file={model!r}, purpose="completions")
spec = spec_for_values(engine="llama.cpp", engine_version="", model=model, served_name="gemma", port={port},
    knobs={{"ctx_size": 1024, "parallel": 1, "n_gpu_layers": 0}}, env={{}})
revision = revision_create(host=host, spec=spec, message="lan", actor=None)
op = switch_request(revision=revision, actor=None)
deadline = time.monotonic() + 120
while op.state not in ("succeeded", "failed", "lost", "cancelled") and time.monotonic() < deadline:
    time.sleep(0.2)
    op.refresh_from_db()
if op.state == "succeeded":
    alias_set(host=host, name="chat", revision=revision, actor=None)
key = key_create(name="laptop", actor=None)[1] if op.state == "succeeded" else ""
print(json.dumps({{"state": op.state, "error": op.error, "key": key, "host": host.name, "address": host.address,
    "number": revision.number}}))
"""


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)


class Lan:
    """A network namespace joined to this machine by a veth pair: `here` is this machine's end
    (the panel's LAN address), `there` the namespace's (a laptop on the LAN)."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100_000}"
        self.ns, self.veth, self.peer = f"cplan{tag}", f"cpl{tag}a", f"cpl{tag}b"
        base = 4 * random.randrange(1, 63)  # noqa: S311 - a /30 of 10.213.7.0/24, not a secret
        self.here, self.there = f"10.213.7.{base + 1}", f"10.213.7.{base + 2}"

    def up(self) -> None:
        steps = [
            ("netns", "add", self.ns),
            ("link", "add", self.veth, "type", "veth", "peer", "name", self.peer),
            ("link", "set", self.peer, "netns", self.ns),
            ("addr", "add", f"{self.here}/30", "dev", self.veth),
            ("link", "set", self.veth, "up"),
            ("netns", "exec", self.ns, "ip", "addr", "add", f"{self.there}/30", "dev", self.peer),
            ("netns", "exec", self.ns, "ip", "link", "set", self.peer, "up"),
            ("netns", "exec", self.ns, "ip", "link", "set", "lo", "up"),
        ]
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                raise RuntimeError(f"ip {' '.join(step)}: {done.stderr.strip()}")

    def down(self) -> None:
        _ip("link", "del", self.veth)  # its peer goes with it
        _ip("netns", "del", self.ns)

    def curl(self, *args: str, timeout: float = 60) -> tuple[int, str]:
        """curl from inside the namespace: (HTTP status, body)."""
        argv = ["ip", "netns", "exec", self.ns, "curl", "-sS", "-m", str(int(timeout)), "-w", "\n%{http_code}", *args]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 10, check=False)
        body, _, code = out.stdout.rpartition("\n")
        return int(code or 0), body or out.stderr


@pytest.fixture
def lan() -> Iterator[Lan]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    probe = Lan()
    made = _ip("netns", "add", probe.ns)
    if made.returncode != 0:
        pytest.skip(f"this machine refuses network namespaces: {made.stderr.strip()}")
    _ip("netns", "del", probe.ns)
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    try:
        probe.up()
        yield probe
    finally:
        probe.down()


class LanPanel(EmbeddedPanel):
    """The embedded panel as `CONTROLPANEL_LAN_ADDRESS=... ./scripts/run` starts it: no --bind."""

    address = ""

    @property
    def url(self) -> str:
        return f"http://{self.address}:8000"

    def start(self) -> LanPanel:
        self._ready_before = {name: self.log(name).count(" ready.") for name in ("worker", "agent")}
        out = open(self.out_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "embedded"],
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self


def _lan_env(data: Path, address: str) -> dict[str, str]:
    env = embedded_env(
        data,
        CONTROLPANEL_LAN_ADDRESS=address,
        CONTROLPANEL_MODEL_DIRS=str(Path(gemma_model_path()).parent),
        CONTROLPANEL_AGENT_SERVING_S="0.5",
        CONTROLPANEL_ROUTER_REFRESH_S="0.5",
    )
    for name in REPLACED:
        env.pop(name, None)
    return env


def _wait_for(check: Any, what: str, timeout: float, panel: EmbeddedPanel) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout:.0f} s; last: {last!r}\n{panel.output()}")


def test_one_setting_serves_the_box_to_the_lan(lan: Lan, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    if not shutil.which(CHROMIUM):
        pytest.skip("Chromium is not installed (apt-get install -y chromium)")
    data = tmp_path / "data"
    assert not data.exists()
    env = _lan_env(data, lan.here)
    prepare(data, env)  # what scripts/run does first: migrate, catalog, `host register-local`, an admin
    panel = LanPanel(data, 8000)
    panel.address = lan.here
    panel.env = env
    panel.start()
    try:
        panel.wait_healthy(timeout=120)
        assert f"running at http://{lan.here}:8000/" in panel.out_path.read_text(errors="replace")
        served = json.loads(panel.django(SERVE.format(model=gemma_model_path(), port=free_port())).splitlines()[-1])
        assert served["state"] == "succeeded", (served, panel.output())
        assert served["address"] == lan.here  # the host's address followed the setting (audited)
        host, key = served["host"], served["key"]

        # A laptop on the LAN: the panel answers there.
        assert lan.curl(f"http://{lan.here}:8000/healthz")[0] == 200

        # The front door by alias, with a key (and not without one).
        chat = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8})
        post = ["-H", "Content-Type: application/json", "-d", chat]
        auth = ["-H", f"Authorization: Bearer {key}"]

        def door_serves() -> bool:
            code, body = lan.curl(*auth, f"http://{lan.here}:4000/v1/models", timeout=10)
            return code == 200 and '"chat"' in body

        _wait_for(door_serves, "the front door serves the alias `chat`", 60, panel)
        assert lan.curl(*post, f"http://{lan.here}:4000/v1/chat/completions")[0] == 401
        code, body = lan.curl(*auth, *post, f"http://{lan.here}:4000/v1/chat/completions")
        assert code == 200 and json.loads(body)["choices"], body

        # The door's own state: for this host (which reaches it at the LAN address), not for the LAN.
        assert lan.curl(f"http://{lan.here}:4000/frontdoor/state")[0] == 403
        assert httpx.get(f"http://{lan.here}:4000/frontdoor/state", timeout=10).status_code == 200

        # The lab router, to the host's door at the address the host took from the setting.
        def router_answers() -> tuple[int, str] | None:
            answer = lan.curl(*auth, *post, f"http://{lan.here}:4100/v1/chat/completions", timeout=60)
            return answer if answer[0] == 200 else None

        code, body = _wait_for(router_answers, "the lab router answers for `chat`", 60, panel)
        assert json.loads(body)["choices"], body

        # Chromium inside the namespace: sign in, read the exports.
        wrapper = tmp_path / "chromium-on-the-lan"
        wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {lan.ns} {CHROMIUM} "$@"\n')
        wrapper.chmod(0o700)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(wrapper), args=ARGS)
            try:
                page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
                page.set_default_timeout(30_000)
                page.goto(f"http://{lan.here}:8000/accounts/login/")
                page.fill("input[name=username]", ADMIN[0])
                page.fill("input[name=password]", ADMIN[1])
                page.click("button[type=submit]")
                page.goto(f"http://{lan.here}:8000/hosts/{host}/")
                expect(page.locator("#host-address")).to_contain_text(lan.here)
                page.goto(f"http://{lan.here}:8000/hosts/{host}/revisions/{served['number']}/exports/")
                pre = page.locator("pre").first
                expect(pre).to_contain_text(f"http://{lan.here}:4100/v1")  # through the lab router
                assert page.locator("#export-loopback").count() == 0
                assert "127.0.0.1" not in page.locator("pre").first.inner_text()
                page.goto(f"http://{lan.here}:8000/hosts/{host}/revisions/{served['number']}/exports/?via=door")
                expect(page.locator("pre").first).to_contain_text(f"http://{lan.here}:4000/v1")
            finally:
                browser.close()
    finally:
        if panel.proc is not None and panel.proc.poll() is None:
            panel.stop()
        if panel.proc is not None and panel.proc.poll() is None:
            panel.kill_all()
