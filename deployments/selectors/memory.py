"""Memory planned against measured, for the pages: a revision's devices side by side, a host's
planner error over time, the GPU memory held by processes the panel did not start."""

from __future__ import annotations

from typing import Any

from deployments import plots
from deployments.models import DeploymentRevision, MeasuredMemory, OutsideProcess, PlannerErrorPoint
from deployments.planning import revision_memory as planned_memory_of
from hardware.models import Host

PLOTTED_POINTS = 500  # the newest trend points the host page plots


def device_label(device: str) -> str:
    """`gpu0` -> "GPU 0", `ram` -> "RAM"."""
    return f"GPU {device[3:]}" if device.startswith("gpu") else device.upper()


def error_percent(planned: int | None, measured: int | None) -> float | None:
    """Measured minus planned, in % of planned (above 0: the engine held more than planned)."""
    if not planned or measured is None:
        return None
    return 100.0 * (measured - planned) / planned


def revision_memory(revision: DeploymentRevision, planned: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Each device of `revision`: the planner's bytes now, and what its engine held (latest and
    peak, with when) as its host measured; [] when neither is known."""
    planned = planned_memory_of(revision).devices if planned is None else planned  # the page says why not
    measured = {m.device: m for m in MeasuredMemory.objects.filter(revision=revision)}
    rows = []
    for device in sorted({*planned, *measured}):
        m = measured.get(device)
        rows.append(
            {
                "device": device,
                "label": device_label(device),
                "planned": planned.get(device),
                "latest": m.latest_bytes if m else None,
                "latest_at": m.latest_at if m else None,
                "peak": m.peak_bytes if m else None,
                "peak_at": m.peak_at if m else None,
                "readings": m.readings if m else 0,
                "error": error_percent(planned.get(device), m.peak_bytes if m else None),
            }
        )
    return rows


def memory_for_diff(revision: DeploymentRevision) -> dict[str, dict[str, int | None]]:
    """`revision_memory` as serving.diffing.view.RevisionView.memory takes it."""
    return {row["device"]: {"planned": row["planned"], "peak": row["peak"]} for row in revision_memory(revision)}


def host_planner_error(host: Host) -> dict[str, Any]:
    """The host page's trend: a chart of the planner's error per revision and device, and the
    latest point's figures."""
    newest = list(
        PlannerErrorPoint.objects.filter(host=host)
        .select_related("revision")
        .order_by("-ts")
        .values("ts", "device", "planned_bytes", "measured_bytes", "revision__number")[:PLOTTED_POINTS]
    )
    points = [{**p, "label": f"r{p['revision__number']} {device_label(p['device'])}"} for p in reversed(newest)]
    latest = newest[0] if newest else None
    return {
        "chart": plots.planner_error_chart(points),
        "points": len(points),
        "latest": {**latest, "error": error_percent(latest["planned_bytes"], latest["measured_bytes"])}
        if latest
        else None,
    }


def host_outside_processes(host: Host) -> list[OutsideProcess]:
    return list(OutsideProcess.objects.filter(host=host).order_by("gpu_index", "-bytes"))


def outside_on_gpu(host: Host) -> dict[int, list[tuple[int, str, int]]]:
    """(pid, name, bytes) per GPU index, largest first: what serving.checks.gpu_room_check names."""
    found: dict[int, list[tuple[int, str, int]]] = {}
    for row in host_outside_processes(host):
        found.setdefault(row.gpu_index, []).append((row.pid, row.name, row.bytes))
    return found
