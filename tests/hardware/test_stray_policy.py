"""Another panel's engine on the same port is never stopped by default; an engine this panel
started is known as ours even when its record is lost. Real llama-server, real Gemma 3 270M."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hostagent.runtime.errors import PortBusyError
from hostagent.runtime.strays import find_port_holder, stop_strays_policy
from hostagent.runtime.supervisor import Supervisor
from tests.hostagent.runtime.test_supervisor import llama_spec
from tests.support.llama import free_port

pytestmark = pytest.mark.engine


@pytest.fixture
def panels(tmp_path: Path) -> Iterator[tuple[Supervisor, Supervisor]]:
    ours, theirs = Supervisor(tmp_path / "ours", stop_grace=5.0), Supervisor(tmp_path / "theirs", stop_grace=5.0)
    yield ours, theirs
    ours.stop(grace=2.0)
    theirs.stop(grace=2.0)


def test_the_policy_reads_never_unless_it_says_engines() -> None:
    assert stop_strays_policy({}) == "never"
    assert stop_strays_policy({"CONTROLPANEL_STOP_STRAYS": "engines"}) == "engines"
    assert stop_strays_policy({"CONTROLPANEL_STOP_STRAYS": "Engines "}) == "engines"
    assert stop_strays_policy({"CONTROLPANEL_STOP_STRAYS": "all"}) == "never"  # a typo stops nothing


def test_another_panels_engine_mid_benchmark_is_left_alone(panels: tuple[Supervisor, Supervisor]) -> None:
    ours, theirs = panels
    port = free_port()
    started = theirs.start(llama_spec(port, "theirs"), revision_label="r5", verify=False)
    holder = find_port_holder(port)
    assert holder is not None and holder.owner == theirs.owner != ours.owner

    with pytest.raises(PortBusyError) as caught:
        ours.start(llama_spec(port, "ours"), revision_label="r1", verify=False)

    assert caught.value.pid == started.pid and "CONTROLPANEL_STOP_STRAYS=never" in str(caught.value)
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["id"] == "theirs"
    assert theirs.status().running


def test_our_own_engine_whose_record_was_lost_is_still_ours(panels: tuple[Supervisor, Supervisor]) -> None:
    ours, _ = panels
    port = free_port()
    first = ours.start(llama_spec(port, "first"), revision_label="r1", verify=False)
    ours.state.clear_engine()  # as a worker killed between launch and record would leave it

    second = ours.start(llama_spec(port, "second"), revision_label="r2", verify=False)

    assert [(s.pid, s.kind) for s in second.stopped] == [(first.pid, "panel")]
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["id"] == "second"
    assert "whose record was lost" in "\n".join(ours.log_tail(200))


def test_where_the_policy_allows_it_the_progress_log_names_what_was_stopped(
    panels: tuple[Supervisor, Supervisor],
) -> None:
    ours, theirs = panels
    ours.stop_strays = "engines"  # CONTROLPANEL_STOP_STRAYS=engines on this host
    port = free_port()
    started = theirs.start(llama_spec(port, "theirs"), revision_label="r5", verify=False)
    lines: list[str] = []

    result = ours.start(
        llama_spec(port, "ours"), revision_label="r1", verify=False, on_progress=lambda s, f, m: lines.append(m)
    )

    assert [(s.pid, s.kind) for s in result.stopped] == [(started.pid, "stray")]
    named = [line for line in lines if f"pid {started.pid}" in line]
    assert named and "did not start" in named[0] and "CONTROLPANEL_STOP_STRAYS=engines" in named[0]
    assert "llama-server" in named[0]
