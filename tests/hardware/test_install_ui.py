"""Engine installs from the host page: what a host can install with a default that works, the
install queued as an operation (progress and log on its page), installed versions listed; and
an offline host's page offers no action that needs its agent, and says why."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from deployments.choices import OperationKind, OperationState
from deployments.models import Operation
from hardware.models import Host
from hostagent.binaries import worker_llama_build
from tests.hostagent.runtime.test_installs import build_wheel
from tests.support.operations import record_sent_tasks
from tests.support.pages import install_form


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    return record_sent_tasks(monkeypatch)


@pytest.fixture
def cpu_host(db: Any) -> Host:
    return Host.objects.create(
        name="cpu-1",
        last_heartbeat=timezone.now(),
        engine_installs={"ollama": {"latest": {"path": "/s/venvs/ollama-latest", "installed_at": "2026-01-02T03:04"}}},
    )


def test_the_host_page_offers_engines_with_a_default_that_works(client, cpu_host, operator) -> None:
    client.force_login(operator)
    page = client.get(f"/hosts/{cpu_host.name}/").content.decode()
    build = worker_llama_build()
    assert build.startswith("b")
    assert "<h2>Engines</h2>" in page
    assert f'name="version" value="{build}"' in page  # nothing on the host or in its cache: a compile
    assert f"{build}: compiles for many minutes" in page and "the build the panel itself runs" not in page
    assert "Install llama.cpp (llama-server)" in page and "Install Ollama" in page
    assert "Install vLLM" not in page and "needs an NVIDIA GPU; this host has none" in page
    assert "/s/venvs/ollama-latest" in page  # the installed versions, per host
    assert "runs the newest build installed here" in page


def test_the_build_the_hosts_worker_carries_is_listed(client, cpu_host, operator) -> None:
    cpu_host.engine_state = {"running": False, "carried": {"llama.cpp": "b11434"}}
    cpu_host.save()
    client.force_login(operator)
    page = client.get(f"/hosts/{cpu_host.name}/").content.decode()
    assert "<code>b11434</code>" in page and "carried by the host's worker itself" in page


def test_a_gpu_host_is_offered_vllm_at_the_newest_release_the_panel_knows(client, operator, db) -> None:
    gpu = Host.objects.create(name="gpu-1", nvml_available=True, last_heartbeat=timezone.now())
    client.force_login(operator)
    page = client.get(f"/hosts/{gpu.name}/").content.decode()
    assert "Install vLLM" in page and 'value="0.33.0"' in page


def test_install_from_the_page_queues_an_operation_and_goes_to_its_log(
    client, cpu_host, operator, sent, django_capture_on_commit_callbacks
) -> None:
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/hosts/{cpu_host.name}/install/",
            {"engine": "llama.cpp", "version": worker_llama_build(), "wheelhouse": ""},
            HTTP_HX_REQUEST="true",
        )
    op = Operation.objects.get(host=cpu_host, kind=OperationKind.INSTALL)
    assert response.status_code == 200 and response["HX-Redirect"] == f"/operations/{op.pk}/"
    assert op.params["engine"] == "llama.cpp" and op.params["version"] == worker_llama_build()
    assert op.params["cuda"] is False and op.requested_by == operator
    assert sent == [
        {"name": "agent.install", "kwargs": {"op_id": str(op.pk)}, "queue": cpu_host.queue, "task_id": str(op.pk)}
    ]


def test_a_recorded_venv_is_read_again_from_the_host_page(
    client, cpu_host, operator, viewer, sent, django_capture_on_commit_callbacks
) -> None:
    """Beside a pip-installed engine's install (not Ollama's), with the packages the host read there."""
    packages = {"transformers": "5.19.0", "vllm-gguf-plugin": None}
    cpu_host.engine_installs = {
        **cpu_host.engine_installs,
        "vllm": {
            "0.32.0": {
                "path": "/s/venvs/vllm-0.32.0",
                "installed_at": "2026-12-01T00:00",
                "distribution": "vllm",
                "package_version": "0.32.0",
                "packages": packages,
            },
            # A build from a checkout: no venv to read.
            "0.30.0": {"path": "/src/vllm", "installed_at": "2026-11-01T00:00"},
        },
    }
    cpu_host.save()
    client.force_login(viewer)
    assert "Read again" not in client.get(f"/hosts/{cpu_host.name}/").content.decode()
    client.force_login(operator)
    page = client.get(f"/hosts/{cpu_host.name}/").content.decode()
    assert page.count(">Read again</button>") == 1 and "transformers 5.19.0, vllm-gguf-plugin none" in page
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/hosts/{cpu_host.name}/install/read-again/",
            {"engine": "vllm", "version": "0.32.0"},
            HTTP_HX_REQUEST="true",
        )
    op = Operation.objects.get(host=cpu_host, kind=OperationKind.INSTALL)
    assert response.status_code == 200 and response["HX-Redirect"] == f"/operations/{op.pk}/"
    assert op.params["existing"] == "/s/venvs/vllm-0.32.0" and len(sent) == 1
    response = client.post(
        f"/hosts/{cpu_host.name}/install/read-again/", {"engine": "vllm", "version": "0.31.0"}, follow=True
    )
    assert "Could not read vllm 0.31.0 again: version: cpu-1 has no recorded vllm install" in response.content.decode()


def test_a_bad_version_says_why_on_the_host_page_and_queues_nothing(client, cpu_host, operator, sent) -> None:
    client.force_login(operator)
    response = client.post(
        f"/hosts/{cpu_host.name}/install/", {"engine": "llama.cpp", "version": "master"}, follow=True
    )
    page = response.content.decode()
    assert "Could not install llama.cpp" in page and "build numbers like" in page
    assert not Operation.objects.exists() and sent == []
    response = client.post(f"/hosts/{cpu_host.name}/install/", {"engine": "tgi", "version": "1"}, follow=True)
    assert "Could not install: engine" in response.content.decode()
    assert not Operation.objects.exists()


def test_folders_on_the_host_are_offered_to_admins_only(client, cpu_host, operator, admin_user, sent) -> None:
    """Fails on the old page: every operator had a wheel folder field, and a POST with one was queued."""
    cpu_host.install_dirs = ["/srv/wheels"]
    cpu_host.save()
    client.force_login(operator)
    page = client.get(f"/hosts/{cpu_host.name}/").content.decode()
    assert 'name="wheelhouse"' not in page and 'name="source_dir"' not in page
    assert "runs its code there, so it needs an admin" in page
    response = client.post(
        f"/hosts/{cpu_host.name}/install/",
        {"engine": "llama.cpp", "version": "b7000", "source_dir": "/srv/wheels/llama.cpp"},
        follow=True,
    )
    said = "Could not install llama.cpp: source_dir: Only an admin may install from a folder on the host"
    assert said in response.content.decode()
    assert not Operation.objects.exists() and sent == []

    client.force_login(admin_user)
    page = client.get(f"/hosts/{cpu_host.name}/").content.decode()
    assert "From a folder on the host (admin only)" in page and "<code>/srv/wheels</code>" in page
    assert 'name="wheelhouse"' in page and 'name="source_dir"' in page
    assert page.count('name="source_dir"') == 1  # llama.cpp's offer alone builds from a checkout
    ollama_form = install_form(page, "ollama")
    assert 'name="wheelhouse"' not in ollama_form  # its installer is a script, not pip
    asked = {"engine": "llama.cpp", "version": "b7000", "wheelhouse": "/tmp/x"}
    response = client.post(f"/hosts/{cpu_host.name}/install/", asked, follow=True)
    assert "outside the folders cpu-1 allows installs from (/srv/wheels)" in response.content.decode()
    assert not Operation.objects.exists()
    client.post(f"/hosts/{cpu_host.name}/install/", {**asked, "wheelhouse": "/srv/wheels"})
    assert Operation.objects.get().params["wheelhouse"] == "/srv/wheels"


def test_an_offline_host_offers_no_action_that_needs_its_agent_and_says_why(client, operator, db) -> None:
    client.force_login(operator)
    never = Host.objects.create(name="never-1")
    page = client.get(f"/hosts/{never.name}/").content.decode()
    assert "never-1 has never reported: start its agent" in page
    for action in ("Probe again", "Benchmark this host", "Install ", "Stop the engine"):
        assert action not in page, action
    gone = Host.objects.create(
        name="gone-1", last_heartbeat=timezone.now() - timezone.timedelta(hours=2), engine_state={"running": True}
    )
    page = client.get(f"/hosts/{gone.name}/").content.decode()
    assert "gone-1 is offline: its agent last reported 2" in page and "hours ago" in page
    for action in ("Probe again", "Benchmark this host", "Install ", "Stop the engine"):
        assert action not in page, action
    assert "New revision" in page  # recording a revision needs no agent
    gone.last_heartbeat = timezone.now()
    gone.save()
    page = client.get(f"/hosts/{gone.name}/").content.decode()
    assert "Probe again" in page and "Install llama.cpp" in page and "is offline" not in page


@pytest.mark.engine
@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_install_through_the_page_and_the_real_agent(client, lab, admin_user, tmp_path: Path) -> None:
    host = lab["host"]
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    build_wheel(wheelhouse, "vllm", "0.22.0", console_script="vllm")  # a tiny stand-in for vLLM
    client.force_login(admin_user)  # a folder on the host: admin only, one the host allows
    response = client.post(
        f"/hosts/{host.name}/install/", {"engine": "vllm", "version": "0.22.0", "wheelhouse": str(wheelhouse)}
    )
    op = Operation.objects.get(host=host, kind=OperationKind.INSTALL)
    assert response.status_code == 302 and response["Location"] == f"/operations/{op.pk}/"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        op.refresh_from_db()
        if op.state not in (OperationState.QUEUED, OperationState.RUNNING):
            break
        time.sleep(0.3)
    assert op.state == OperationState.SUCCEEDED, (op.error, op.log[-2000:])
    page = client.get(f"/operations/{op.pk}/").content.decode()
    assert "Successfully installed vllm-0.22.0" in page  # the log, on the operation's page
    page = client.get(f"/hosts/{host.name}/").content.decode()
    assert f"<code>{worker_llama_build()}</code>" in page  # the agent reports the build it carries
    assert str(Path(lab["tmp"]) / "state" / "venvs" / "vllm-0.22.0" / "bin" / "vllm") in page
    assert "(vllm 0.22.0)" in page
