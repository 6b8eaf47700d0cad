"""Memory planned against measured, from the H200 recordings (tests/fixtures/gpu/h200, and
tests/fixtures/nvml/h200_x1.json).

No GPU here: the NVML answers recorded next to a live llama-server, and next to a PyTorch matmul
the panel did not start, are served back by ReplayNvml through the probe's own `read_samples`;
the agent's own `memory_report` (hostagent.held) makes the report from them, and it goes to the
panel through the real agent API, pages and preflight. The GPU is the only thing replayed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from deployments.models import MeasuredMemory, OutsideProcess, PlannerErrorPoint
from deployments.planning import revision_memory
from hardware.credentials import host_token_issue
from hostagent.held import memory_report
from hostagent.preflight import gpu_memory_checks
from hostagent.probes.nvml import nvml_session, read_samples
from hostagent.probes.replay import ReplayNvml, load_fixture
from serving.diffing import fmt
from serving.wire import PlannedMemory
from tests.gpu import test_h200_replay as h200

h200_revisions = h200.h200_revisions  # the fixture: r1, r2 (and r3) as the run recorded them
X1 = load_fixture(Path(__file__).resolve().parent.parent / "fixtures" / "nvml" / "h200_x1.json")
MATMUL_PID = 472  # the recording's PyTorch matmul: a process the panel did not start


def _probed(revisions: list[Any], admin: User) -> tuple[Any, str]:
    """The H200 host as its agent's probe leaves it (NVML answers), and its agent token."""
    from hardware.models import Host

    host, token = host_token_issue(name=revisions[0].host.name, actor=admin)
    Host.objects.filter(pk=host.pk).update(nvml_available=True)
    for revision in revisions:
        revision.host.refresh_from_db()
    host.refresh_from_db()
    return host, token


def _post(client: Client, token: str, body: dict[str, Any]) -> Any:
    import json

    return client.post(
        "/agent/v1/telemetry", data=json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


def _matmul_samples() -> list[Any]:
    """The first round of h200_x1's `telemetry_load` (a bf16 matmul loop at 690 W), replayed."""
    first = X1["sessions"]["telemetry_load"]["result"][0]
    with nvml_session(ReplayNvml.from_fixture(X1, ["telemetry_load"])) as lib:
        return read_samples(lib, clock=lambda: first[0]["timestamp"])


def _report(session: str, groups: dict[str, list[int]]) -> dict[str, Any]:
    samples = _matmul_samples() if session == "telemetry_load" else h200.replayed(session)[0]
    return {
        "gpu_samples": [s.to_dict() for s in samples],
        "memory": memory_report(groups, samples, now=samples[0].timestamp, name_of=lambda pid: "python").to_dict(),
    }


@pytest.mark.django_db
def test_planned_against_measured_from_the_h200_recording(h200_revisions, admin_user: User, client: Client) -> None:
    """What llama-server held on the H200 (NVML, per process) is stored per revision beside the
    planner's figure; the revision page and the diff show both; the host page plots the error."""
    r1, r2 = h200_revisions[:2]
    host, token = _probed(h200_revisions, admin_user)
    for session, revision, switch in (("serving_r1_0", r1, 0), ("serving_r2_1", r2, 1)):
        answer = _post(Client(), token, _report(session, {str(revision.pk): [h200.engine_pid(switch)]}))
        assert answer.status_code == 200, answer.content
        assert answer.json()["memory"] == 1
    for revision, session in ((r1, "serving_r1_0"), (r2, "serving_r2_1")):
        ((gpu,),) = h200.replayed(session)
        (process,) = gpu.processes or ()
        row = MeasuredMemory.objects.get(revision=revision, device="gpu0")
        assert row.latest_bytes == row.peak_bytes == process.used_memory_bytes
        assert row.planned_bytes == revision_memory(revision).devices["gpu0"]
        # The planner's bytes are what llama-server held, or up to 6% more (recorded: 3.6 GiB r1, 6.7 GiB r2).
        assert process.used_memory_bytes <= row.planned_bytes <= process.used_memory_bytes * 1.06
        assert OutsideProcess.objects.filter(host=host).count() == 0  # the engine is the panel's own

    client.force_login(admin_user)
    page = client.get(f"/hosts/{host.name}/revisions/{r1.number}/").content.decode()
    r1_row = MeasuredMemory.objects.get(revision=r1)
    assert "Memory, planned and measured" in page
    assert fmt.exact_bytes(r1_row.planned_bytes) in page and fmt.exact_bytes(r1_row.latest_bytes) in page

    diff = client.get(f"/hosts/{host.name}/diff/{r1.number}/{r2.number}/").content.decode()
    assert 'id="diff-memory"' in diff
    for revision in (r1, r2):
        row = MeasuredMemory.objects.get(revision=revision)
        assert fmt.size_bytes(row.planned_bytes) in diff and fmt.size_bytes(row.peak_bytes) in diff
    assert "GPU 0 measured, peak" in diff and "% of planned" in diff

    points = list(PlannerErrorPoint.objects.filter(host=host).order_by("ts"))
    assert [p.revision_id for p in points] == [r1.pk, r2.pk]
    assert all(-6.0 <= 100 * (p.measured_bytes - p.planned_bytes) / p.planned_bytes <= 0 for p in points)
    host_page = client.get(f"/hosts/{host.name}/").content.decode()
    assert 'data-series="r1 GPU 0" data-points="1"' in host_page
    assert 'data-series="r2 GPU 0" data-points="1"' in host_page


@pytest.mark.django_db
def test_readings_keep_the_latest_and_the_peak_and_a_trend_point_every_five_minutes(
    h200_revisions, admin_user: User
) -> None:
    """Bounded: one row per revision and device (latest and peak), a trend point at most every
    five minutes, however often the agent reports."""
    r1 = h200_revisions[0]
    _host, token = _probed(h200_revisions, admin_user)
    body = _report("serving_r1_0", {str(r1.pk): [h200.engine_pid(0)]})
    start, held = body["memory"]["ts"], body["memory"]["engines"][0]["devices"]["gpu0"]
    for n, (minutes, size) in enumerate([(0, held), (1, held + 2**30), (2, held - 2**20), (6, held)]):
        body["memory"].update(ts=start + 60 * minutes)
        body["memory"]["engines"][0]["devices"]["gpu0"] = size
        assert _post(Client(), token, {"memory": body["memory"]}).json()["memory"] == 1, n
    row = MeasuredMemory.objects.get(revision=r1)
    assert (row.latest_bytes, row.peak_bytes, row.readings) == (held, held + 2**30, 4)
    assert row.peak_at.timestamp() == pytest.approx(start + 60)
    assert PlannerErrorPoint.objects.filter(revision=r1).count() == 2  # at 0 and 6 minutes


@pytest.mark.django_db
def test_a_process_the_panel_did_not_start_is_on_the_host_page(h200_revisions, admin_user: User, client: Client):
    """The recorded matmul (pid 472, 714 MiB on GPU 0) is no engine of the panel's: the host page
    lists it with its pid, name, GPU and bytes."""
    host, token = _probed(h200_revisions, admin_user)
    answer = _post(Client(), token, _report("telemetry_load", {}))
    assert answer.status_code == 200, answer.content
    (row,) = OutsideProcess.objects.filter(host=host)
    assert (row.pid, row.name, row.gpu_index, row.bytes) == (MATMUL_PID, "python", 0, 748683264)
    client.force_login(admin_user)
    page = client.get(f"/hosts/{host.name}/").content.decode()
    listed = page.split('class="outside-processes"')[1].split("</table>")[0]
    assert f'data-pid="{MATMUL_PID}"' in listed and "python" in listed and fmt.exact_bytes(748683264) in listed
    # The next report without it: gone from the page.
    _post(Client(), token, {"memory": {"ts": row.seen_at.timestamp() + 10, "engines": [], "outside": []}})
    page = client.get(f"/hosts/{host.name}/").content.decode()
    assert f'data-pid="{MATMUL_PID}"' not in page and "None in the agent's last report" in page


def test_the_hosts_preflight_names_the_process_that_holds_the_memory_the_plan_needs() -> None:
    """On the host, before anything is stopped: the plan's bytes on GPU 0 against what NVML says
    is free there, naming the process the panel did not start (the recorded matmul)."""
    samples = _matmul_samples()
    (gpu,) = samples
    free = gpu.memory_total_bytes - gpu.memory_used_bytes  # 139.1 GiB on the recorded H200
    refused = gpu_memory_checks(
        PlannedMemory(devices={"gpu0": free + 2**30}), samples, stopping=(), ours=(), name_of=lambda pid: "python"
    )
    assert [c.status for c in refused] == ["fail"]
    assert refused[0].message == (
        "0.7 GiB on GPU 0 is held by pid 472 (python): the plan needs 140.1 of the 139.1 GiB left."
    )
    fits = gpu_memory_checks(PlannedMemory(devices={"gpu0": 2**34}), samples, stopping=(), ours=(), name_of=str)
    assert [c.status for c in fits] == ["ok"] and "the plan's 16.0 GiB fit in the 139.1 GiB left" in fits[0].message
    # The matmul's memory counts as freed when it is the engine the switch stops.
    freed = gpu_memory_checks(
        PlannedMemory(devices={"gpu0": free + 2**29}), samples, stopping=(MATMUL_PID,), ours=(MATMUL_PID,)
    )
    assert [c.status for c in freed] == ["ok"] and freed[0].message.startswith("GPU 0: the plan's")


@pytest.mark.django_db
def test_the_switch_confirmation_counts_memory_held_by_processes_the_panel_did_not_start(
    h200_revisions, admin_user: User, client: Client
) -> None:
    """The panel's half of the preflight: the plan's bytes on GPU 0 against the GPU's memory less
    what the host last reported held by others; the same sentence as the host's."""
    from deployments.services.preflight import panel_preflight
    from hardware.models import GPU

    r1 = h200_revisions[0]
    host, token = _probed(h200_revisions, admin_user)
    need = revision_memory(r1).devices["gpu0"]
    GPU.objects.filter(host=host, index=0).update(memory_bytes=need + 256 * 2**20)  # fits, but not beside 714 MiB
    assert [c.status for c in panel_preflight(r1) if c.name == "memory"] == []  # nobody else holds any yet
    _post(Client(), token, _report("telemetry_load", {}))
    r1.host.refresh_from_db()
    (memory,) = [c for c in panel_preflight(r1) if c.name == "memory"]
    left = need + 256 * 2**20 - 748683264
    expected = (
        f"0.7 GiB on GPU 0 is held by pid 472 (python): the plan needs {need / 2**30:.1f} of the "
        f"{left / 2**30:.1f} GiB left."
    )
    assert memory.status == "fail" and memory.message == expected
    client.force_login(admin_user)
    page = client.get(f"/hosts/{host.name}/revisions/{r1.number}/switch/").content.decode()
    assert "held by pid 472 (python): the plan needs" in page and "preflight problem" in page


@pytest.mark.django_db
def test_a_memory_report_that_is_wrong_is_refused_and_another_hosts_revision_is_left_out(
    h200_revisions, admin_user: User
) -> None:
    r1 = h200_revisions[0]
    _host, token = _probed(h200_revisions, admin_user)
    good = _report("serving_r1_0", {str(r1.pk): [h200.engine_pid(0)]})["memory"]
    for engines, outside, said in (
        ([{"revision_id": str(r1.pk), "devices": {"vram": 1}}], [], "is not gpuN or ram"),
        ([{"revision_id": str(r1.pk), "devices": {"gpu0": -1}}], [], "out of range"),
        ([{"revision_id": "r1", "devices": {"gpu0": 1}}], [], "must be a revision's id"),
        ([], [{"pid": 1, "name": "x\nforged", "gpu": 0, "bytes": 1}], "must be one line"),
        ([], [{"pid": 1, "name": "x", "gpu": 0, "bytes": 1.5}], "whole number"),
    ):
        answer = _post(Client(), token, {"memory": {**good, "engines": engines, "outside": outside}})
        assert answer.status_code == 400 and said in answer.content.decode(), answer.content
    assert not MeasuredMemory.objects.exists() and not OutsideProcess.objects.exists()

    other, other_token = host_token_issue(name="another-host", actor=admin_user)
    answer = _post(Client(), other_token, {"memory": good})  # r1 is not the other host's revision
    assert answer.status_code == 200 and answer.json()["memory"] == 0
    assert not MeasuredMemory.objects.exists()
