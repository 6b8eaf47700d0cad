"""A real Prometheus (Debian's package) scrapes the panel, two hosts' front doors (found through the
lab router's service discovery, as docs/metrics.md configures it) and the lab router, and every
panel of the Grafana dashboard in docs/grafana/lab.json finds data in it.

The lab is tests/router/conftest.py's: real front doors before real llama-servers (Gemma 3 270M),
the router as its own process; the panel is the live test server. The GPUs are the edge we cannot
reach here: their telemetry is stored as the agents report it, from an H200's recorded NVML probe
(the figures below are that recording's)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from django.utils import timezone
from openai import OpenAI

from hardware.models import GpuSample, Host
from tests.hardware.factories import GPUFactory
from tests.support.llama import free_port
from tests.support.panel import ROOT

from .conftest import Lab

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

PROMETHEUS = "/usr/bin/prometheus"
DASHBOARD = ROOT / "docs" / "grafana" / "lab.json"
# Grafana's variables as the board's defaults set them: every host, a rate window a 1 s scrape fills.
VARIABLES = {"$__rate_interval": "15s", "$__range": "5m", "$host": ".*"}


def config(panel: str, router: str) -> str:
    """The scrape configuration docs/metrics.md gives, at a 1 s interval."""
    jobs = [
        {"job_name": "controlpanel", "static_configs": [{"targets": [urlsplit(panel).netloc]}]},
        {"job_name": "controlpanel-router", "static_configs": [{"targets": [urlsplit(router).netloc]}]},
        {
            "job_name": "controlpanel-doors",
            "honor_labels": True,
            "http_sd_configs": [{"url": f"{router}/prometheus/doors", "refresh_interval": "1s"}],
        },
    ]
    return json.dumps({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": jobs})


@contextlib.contextmanager
def prometheus(folder: Path, panel: str, router: str) -> Iterator[str]:
    (folder / "prometheus.yml").write_text(config(panel, router))  # JSON is YAML
    port = free_port()
    argv = [PROMETHEUS, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}"]
    argv += [f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
    with (folder / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, (folder / "prometheus.log").read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def queries(dashboard: dict[str, Any]) -> dict[str, str]:
    """Each panel's title -> its PromQL, Grafana's variables filled in (rows' nested panels too)."""
    found: dict[str, str] = {}
    panels = list(dashboard["panels"])
    while panels:
        panel = panels.pop(0)
        panels.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            found[f"{panel['title']} ({target['refId']})"] = expr
    return found


def variable_values(prom: str, dashboard: dict[str, Any]) -> dict[str, list[str]]:
    """Each `label_values(series, label)` variable of the board -> the values Prometheus has."""
    found = {}
    for variable in dashboard["templating"]["list"]:
        match = re.fullmatch(r"label_values\((.+), *(\w+)\)", variable.get("definition", ""))
        if match:
            series, label = match.groups()
            answer = httpx.get(f"{prom}/api/v1/label/{label}/values", params={"match[]": series}, timeout=10)
            found[variable["name"]] = answer.json()["data"]
    return found


def results(prom: str, expr: str) -> list[Any]:
    answer = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    return list(answer["data"]["result"])


def test_every_dashboard_panel_has_data_in_a_real_prometheus(two_hosts: Lab, live_server: Any, tmp_path: Path) -> None:
    if not shutil.which(PROMETHEUS):
        pytest.skip("Prometheus is not installed (apt-get install -y prometheus)")
    lab, now = two_hosts, timezone.now()
    for host in Host.objects.filter(name__in=lab.doors):
        for index in range(2):
            gpu = GPUFactory(host=host, index=index, name="NVIDIA H200", memory_bytes=150_754_820_096)
            GpuSample.objects.create(
                gpu=gpu, ts=now, util_pct=100.0, mem_used_bytes=644_939_776, power_w=93.64, temp_c=37.0,
                energy_mj=2_778_872,
            )  # fmt: skip
    client = OpenAI(base_url=f"{lab.router}/v1", api_key=lab.keys["all"], max_retries=0, timeout=120)
    with prometheus(tmp_path, live_server.url, lab.router) as prom:
        ask = [{"role": "user", "content": "Count to ten."}]
        dashboard = json.loads(DASHBOARD.read_text())
        wanted = queries(dashboard)
        empty = dict(wanted)
        deadline = time.monotonic() + 90
        while empty and time.monotonic() < deadline:
            Host.objects.filter(name__in=lab.doors).update(last_heartbeat=timezone.now())  # the agents report
            for alias in ("coder", "fast"):  # traffic on both hosts, so that every rate has something
                client.chat.completions.create(model=alias, messages=ask, max_tokens=2)
            empty = {title: expr for title, expr in empty.items() if not results(prom, expr)}
            time.sleep(0.5)
        targets = httpx.get(f"{prom}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        choices = variable_values(prom, dashboard)
    assert len(wanted) >= 15
    assert {t["labels"]["job"] for t in targets if t["health"] == "up"} == {
        "controlpanel", "controlpanel-router", "controlpanel-doors",
    }  # fmt: skip
    doors = {t["labels"].get("host") for t in targets if t["labels"]["job"] == "controlpanel-doors"}
    assert doors == {"lab-a", "lab-b"}
    assert not empty, f"panels without data: {json.dumps(empty, indent=1)}"
    assert choices == {"host": ["lab-a", "lab-b"]}  # the board's host picker offers both hosts
