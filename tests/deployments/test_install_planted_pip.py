"""Issue 24, end to end: a `pip-99.0` wheel planted in a folder the host can read runs nothing.

Through the real host agent (a Celery worker on its own queue talking to the panel over
HTTP): an operator may not name a folder at all; an admin may not name one the host does not
allow, whether the panel catches it (the folders the agent reported) or only the host can (a
symlink out of an allowed folder, or a panel that believes the host allows more than it does);
and an admin's install from an allowed folder that also holds the planted pip installs the
engine without upgrading pip. In no case does the planted code write its marker file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from deployments.choices import OperationKind, OperationState
from deployments.models import Operation
from deployments.services.installs import install_request
from hardware.models import Host
from tests.hostagent.runtime.test_installs import build_planted_pip, build_wheel
from tests.support.operations import wait_done

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def test_a_planted_pip_runs_nothing_whoever_asks(lab, operator, admin_user, tmp_path: Path) -> None:
    host: Host = lab["host"]
    marker = tmp_path / "planted-pip-ran"
    allowed = tmp_path / "wheelhouse"  # the agent's CONTROLPANEL_INSTALL_DIRS (tests/support/agent.py)
    planted = tmp_path / "planted"  # any folder the agent's user can read
    for folder in (allowed, planted):
        folder.mkdir()
        build_planted_pip(folder, marker)
        build_wheel(folder, "vllm", "0.22.0", console_script="vllm")  # a tiny stand-in for vLLM
    assert host.install_dirs == [str(allowed)]  # what the agent reported when it registered
    venvs = Path(lab["tmp"]) / "state" / "venvs"

    # An operator: refused by the panel, whichever folder; nothing queued.
    for folder in (planted, allowed):
        with pytest.raises(ValidationError) as info:
            install_request(host=host, engine="vllm", version="0.22.0", wheelhouse=str(folder), actor=operator)
        assert "Only an admin may install from a folder on the host" in info.value.messages[0]
    # An admin, from a folder the host does not allow: refused by the panel, naming the setting.
    with pytest.raises(ValidationError) as info:
        install_request(host=host, engine="vllm", version="0.22.0", wheelhouse=str(planted), actor=admin_user)
    assert "CONTROLPANEL_INSTALL_DIRS" in info.value.messages[0] and str(planted) in info.value.messages[0]
    assert not Operation.objects.filter(host=host, kind=OperationKind.INSTALL).exists()

    # A symlink inside the allowed folder that leads out: the panel sees an allowed name, the host
    # resolves it and refuses before any step runs.
    os.symlink(planted, allowed / "innocent")
    op = wait_done(
        install_request(
            host=host, engine="vllm", version="0.22.0", wheelhouse=str(allowed / "innocent"), actor=admin_user
        ),
        timeout=240,
    )
    assert op.state == OperationState.FAILED, (op.error, op.log[-2000:])
    assert op.error.startswith("This host refuses the install: wheelhouse: ")
    assert f"resolves to {planted}" in op.error and "CONTROLPANEL_INSTALL_DIRS" in op.error

    # A panel that believes the host allows more than its agent says: the host never takes its word.
    Host.objects.filter(pk=host.pk).update(install_dirs=[str(tmp_path)])
    host.refresh_from_db()
    op = wait_done(
        install_request(host=host, engine="vllm", version="0.22.0", wheelhouse=str(planted), actor=admin_user),
        timeout=240,
    )
    assert op.state == OperationState.FAILED and "outside this host's install folders" in op.error, op.error
    assert not (venvs / "vllm-0.22.0").exists()  # not even the venv was made
    assert not marker.exists()

    # An admin, from the allowed folder that holds the planted pip too: the engine installs, pip is
    # never upgraded, the planted code never runs.
    Host.objects.filter(pk=host.pk).update(install_dirs=[str(allowed)])
    host.refresh_from_db()
    op = wait_done(
        install_request(host=host, engine="vllm", version="0.22.0", wheelhouse=str(allowed), actor=admin_user),
        timeout=240,
    )
    assert op.state == OperationState.SUCCEEDED, (op.error, op.log[-3000:], lab["agent"].log_tail())
    assert "Successfully installed vllm-0.22.0" in op.log and "upgrade pip" not in op.log
    assert not marker.exists(), marker.read_text()
    venv_python = venvs / "vllm-0.22.0" / "bin" / "python"
    shipped = subprocess.run(
        [str(venv_python), "-m", "pip", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert not shipped.startswith("pip 99.0") and not marker.exists()
