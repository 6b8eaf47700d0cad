"""A revision's client exports through the lab router, run as a user runs them: the Exports page's
`?via=router` downloads of the Python (openai) and curl snippets, with the user's inference key in
CONTROLPANEL_KEY, answered through the real router by a host's real engine (tests/router/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench.bench_frontdoor import metric
from deployments.models import DeploymentRevision

from .conftest import Lab

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


def test_the_exported_python_and_curl_snippets_talk_to_the_router_with_the_alias(
    two_hosts: Lab, client: Client, operator: User, settings: Any, tmp_path: Path
) -> None:
    settings.ROUTER_URL = two_hosts.router
    client.force_login(operator)
    revision = DeploymentRevision.objects.get(host__name="lab-a")
    page = f"/hosts/lab-a/revisions/{revision.number}/exports/"
    env = {**os.environ, "CONTROLPANEL_KEY": two_hosts.keys["all"]}

    python = client.get(page, {"via": "router", "download": "python"}).content.decode()
    assert f"base_url='{two_hosts.router}/v1'" in python and "model='chat'," in python  # lab-a's first alias
    (tmp_path / "client.py").write_text(python)
    said = subprocess.run(  # noqa: S603 - our export, run as the user would
        [sys.executable, "client.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert said.returncode == 0 and said.stdout.strip(), said.stderr[-2000:]

    curl = client.get(page, {"via": "router", "download": "curl"}).content.decode()
    (tmp_path / "request.sh").write_text(curl)
    done = subprocess.run(  # noqa: S603 - our export, run as the user would
        ["bash", "request.sh"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,  # noqa: S607
    )
    assert done.returncode == 0, done.stderr[-2000:]
    listed, end = json.JSONDecoder().raw_decode(done.stdout)  # curl -s: the two bodies, one after the other
    answer = json.loads(done.stdout[end:])
    assert "chat" in {model["id"] for model in listed["data"]}  # the router's /v1/models: the lab's names
    # The lab serves the package's Gemma 3 270M, a base model recorded for completions: the snippet
    # sends it a prompt to continue (serving.exports), not a chat.
    assert answer["object"] == "text_completion" and answer["choices"][0]["text"]

    # Both went through the router by the alias (whichever host served it), with the user's key.
    assert metric(two_hosts.router, "router_requests_total", alias="chat", code="200") == 2
    assert metric(two_hosts.router, "router_requests_total") == 2
