"""The first hour of a new user, in real Chromium, from an empty data folder.

`./scripts/run` as a newcomer types it (its own setup steps, the one-time admin password it
prints, then its supervisor with the embedded Redis, the worker, the agent and gunicorn).
Then only the browser: sign in with that password, install llama.cpp from the host page,
import the model from its GGUF file, record a revision and switch to it, record a second one
and switch, break one (a download cut short) and see the switch roll back, run a small
benchmark and open the diff. Ctrl-C stops it all at the end, the engine included.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.chromium import snap
from tests.browser.pages import start_custom_benchmark
from tests.support.embedded import ROOT, EmbeddedPanel
from tests.support.llama import free_port, gemma_package_path

pytestmark = [pytest.mark.browser, pytest.mark.engine, pytest.mark.celery]

OPERATION_S = 600_000  # an install may compile llama.cpp when pip has no cached wheel


class ScriptsRun(EmbeddedPanel):
    """The panel started the way the README says: `./scripts/run` (it execs the supervisor)."""

    t0 = 0.0

    def mark(self, what: str) -> None:
        """The newcomer's timeline from `./scripts/run`, printed (`-s` shows it): with an empty pip
        cache (XDG_CACHE_HOME an empty folder) it is the first hour's honest time."""
        print(f"first hour: {time.monotonic() - self.t0:7.1f} s  {what}", flush=True)

    def start(self) -> ScriptsRun:
        out = open(self.out_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            ["bash", str(ROOT / "scripts" / "run")],
            cwd=ROOT,
            env={**self.env, "PANEL_BIND": f"127.0.0.1:{self.port}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def admin_password(self) -> str:
        printed = self.out_path.read_text(errors="replace")
        found = re.search(r"Created admin login: user 'admin', password '([^']+)'", printed)
        assert found, f"scripts/run printed no admin password:\n{printed[-6000:]}"
        return found.group(1)


@pytest.fixture
def panel(tmp_path: Path) -> Iterator[ScriptsRun]:
    data = tmp_path / "data"
    assert not data.exists()
    models = data / "models"  # one of the host's model folders by default (hostagent/runtime/confine.py)
    started = ScriptsRun(data, free_port())
    started.out_path = tmp_path / "scripts-run.out"
    started.t0 = time.monotonic()  # the newcomer types ./scripts/run
    started.start()
    try:
        started.wait_healthy(timeout=300)  # scripts/run installs, migrates and loads the catalog first
        models.mkdir(exist_ok=True)
        yield started
    finally:
        if started.proc is not None and started.proc.poll() is None:
            started.kill_all()


def _wait_operation(page: Any, expected: str) -> None:
    """On an operation's page: wait for it to end and check how it ended."""
    from playwright.sync_api import expect

    expect(page).to_have_url(re.compile(r"/operations/[0-9a-f-]+/$"))
    badge = page.locator("#op-status .badge").first
    expect(badge).not_to_have_text(re.compile(r"^(Queued|Running)$"), timeout=OPERATION_S)
    assert badge.inner_text() == expected, page.locator("#op-status").inner_text()


def _record_revision(page: Any, *, model: str, knobs: str, port: int, message: str) -> None:
    from playwright.sync_api import expect

    page.select_option("select[name=model_variant]", label=model)
    page.select_option("select[name=engine]", "llama.cpp")
    page.fill("textarea[name=knobs]", knobs)
    page.fill("input[name=served_name]", "gemma")
    page.fill("input[name=port]", str(port))
    page.fill("textarea[name=message]", message)
    expect(page.locator("#planner")).not_to_contain_text("Reading the settings")
    page.click("#revision-form button[type=submit]")


def _switch_from_revision_page(page: Any, number: int) -> None:
    page.get_by_role("button", name=re.compile(rf"Switch .* to r{number}…$")).click()
    page.get_by_role("button", name="Switch now").click()


def _import_gguf(page: Any, path: Path, name: str) -> None:
    from playwright.sync_api import expect

    page.get_by_role("link", name="Models", exact=True).click()
    page.get_by_role("link", name=re.compile("Import")).first.click()
    form = page.locator("#import-gguf")
    form.locator("input[name=gguf-path]").fill(str(path))
    form.locator("input[name=gguf-name]").fill(name)
    form.get_by_role("button", name="Read GGUF header").click()
    expect(page.locator("main")).to_contain_text(name)
    expect(page.locator(".errorlist")).to_have_count(0)


def test_the_first_hour_from_an_empty_data_folder_in_the_browser(panel: ScriptsRun, page: Any) -> None:
    from playwright.sync_api import expect

    base = panel.url
    models = panel.data_dir / "models"
    gemma = models / "gemma-3-270m-Q4_K_M.gguf"
    shutil.copyfile(gemma_package_path(), gemma)  # the package's file (no chat template) in the model folder
    engine_port = free_port()

    # Sign in with the password scripts/run printed once.
    page.goto(base + "/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", panel.admin_password())
    panel.mark("./scripts/run serves the panel: signed in")
    page.click("button[type=submit]")
    card = page.locator("article[data-host]").first
    expect(card).to_contain_text("online")
    host = card.get_attribute("data-host")
    steps = page.locator(".first-steps li")
    expect(steps).to_have_count(4)
    expect(page.locator(".first-steps li.done")).to_have_count(0)
    snap(page, "first-hour-dashboard")

    # llama.cpp: where the panel's .venv does not carry it, the first run started installing it in
    # the background once its broker ran, and the first step follows that install (its operation page,
    # never a broker refusal); otherwise, or once done, it links to the host page's engines, where the
    # install form offers a version.
    steps.first.get_by_role("link", name="Install an engine").click()
    if re.search(r"/operations/[0-9a-f-]+/$", page.url):
        expect(page.locator("main")).to_contain_text("Install engine on")
        expect(page.locator("main")).not_to_contain_text("broker is unreachable")
        _wait_operation(page, "Succeeded")
        page.goto(f"{base}/hosts/{host}/")
    else:
        expect(page.locator("#host-engines")).to_contain_text("Install an engine")
        install = page.locator("form.install-form", has=page.locator("input[name=engine][value='llama.cpp']"))
        offered = install.locator("input[name=version]").input_value()
        assert re.fullmatch(r"b\d{4,}", offered), offered
        install.get_by_role("button").click()
        _wait_operation(page, "Succeeded")
        page.go_back()
        page.reload()
    expect(page.locator("#host-engines table.installs")).to_contain_text(re.compile(r"b\d{4,}"))
    panel.mark("llama.cpp installed")

    # Import the model from its GGUF header.
    _import_gguf(page, gemma, "gemma-3-270m")
    panel.mark("model imported")

    # r1: record it with the live planner, then switch to it.
    page.goto(f"{base}/hosts/{host}/")
    page.get_by_role("link", name="New revision…").click()
    # The form's label says what the GGUF is for: a base model, served for completions (no chat template needed).
    _record_revision(
        page,
        model="gemma-3-270m (completions)",
        knobs="ctx_size=2048\nparallel=1",
        port=engine_port,
        message="gemma, 2k context",
    )
    expect(page).to_have_url(re.compile(rf"/hosts/{host}/revisions/1/$"))
    _switch_from_revision_page(page, 1)
    _wait_operation(page, "Succeeded")
    assert httpx.get(f"http://127.0.0.1:{engine_port}/v1/models", timeout=5).json()["data"][0]["id"] == "gemma"
    panel.mark("r1 serves and answered the switch's test completion (the GGUF is a base model)")
    page.get_by_role("link", name="Dashboard").click()
    expect(page.locator(f'article[data-host="{host}"]')).to_contain_text("r1")
    expect(page.locator(".first-steps")).to_have_count(0)  # a served model: the guide has done its job

    # r2 from r1: a longer context; switch.
    page.goto(f"{base}/hosts/{host}/revisions/1/")
    page.get_by_role("link", name="New revision from this").click()
    page.fill("textarea[name=knobs]", "ctx_size=4096\nparallel=1")
    page.fill("textarea[name=message]", "gemma, 4k context")
    page.click("#revision-form button[type=submit]")
    expect(page).to_have_url(re.compile(rf"/hosts/{host}/revisions/2/$"))
    _switch_from_revision_page(page, 2)
    _wait_operation(page, "Succeeded")
    snap(page, "first-hour-switch")

    # r3: weights from a download cut short (the header is whole, the tensors are not): the
    # engine fails to load, the switch rolls back to r2, which serves again.
    broken = models / "gemma-3-270m-partial.gguf"
    with open(gemma, "rb") as src, open(broken, "wb") as dst:
        dst.write(src.read(gemma.stat().st_size // 3))
    _import_gguf(page, broken, "gemma-3-270m-partial")
    page.goto(f"{base}/hosts/{host}/revisions/2/")
    page.get_by_role("link", name="New revision from this").click()
    _record_revision(
        page,
        model="gemma-3-270m-partial (completions)",
        knobs="ctx_size=4096\nparallel=1",
        port=engine_port,
        message="partial",
    )
    expect(page).to_have_url(re.compile(rf"/hosts/{host}/revisions/3/$"))
    _switch_from_revision_page(page, 3)
    _wait_operation(page, "Failed, rolled back")
    expect(page.locator(".rolled-back-note")).to_contain_text("r2")
    snap(page, "first-hour-rollback")
    page.goto(f"{base}/hosts/{host}/")
    expect(page.locator("main")).to_contain_text("r2")
    assert httpx.get(f"http://127.0.0.1:{engine_port}/health", timeout=5).status_code == 200

    # A small benchmark of what serves (r2) from the host page.
    page.get_by_role("link", name="Benchmark this host…").click()
    start_custom_benchmark(page, concurrency="1,2", input_tokens=32, output_tokens=8, requests=2)
    expect(page).to_have_url(re.compile(r"/benchmarks/\d+/$"), timeout=OPERATION_S)
    expect(page.locator("figure[data-chart=throughput] svg g.series")).to_have_count(2)
    snap(page, "first-hour-benchmark")

    # The diff r1 → r2 from r2's page.
    page.goto(f"{base}/hosts/{host}/revisions/2/")
    page.get_by_role("link", name="Diff from parent").click()
    expect(page.locator("main")).to_contain_text("ctx_size")
    expect(page.locator("main")).to_contain_text("4096")
    snap(page, "first-hour-diff")

    # Ctrl-C stops everything, the engine included.
    before = panel.tree()
    assert panel.stop(signal.SIGINT) < 10.0
    left = [(p.pid, p.state(), p.cmdline) for p in before if p.state() is not None]
    assert not left, left
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{engine_port}/health", timeout=2)
