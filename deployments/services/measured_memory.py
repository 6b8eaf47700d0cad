"""Memory planned against measured: the agent's `memory` report (hostagent.held), stored.

Each report (with the host's telemetry) says what each engine the panel started holds per
device, by revision, and which processes the panel did not start hold GPU memory. Kept bounded
(deployments.memory_models): per revision and device the latest reading and the peak; a trend
point beside the planner's figure at most every TREND_EVERY, the host's TREND_KEEP newest kept;
the host's outside processes as of this report.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from deployments.models import DeploymentRevision, MeasuredMemory, OutsideProcess, PlannerErrorPoint
from deployments.planning import revision_memory
from hardware.models import Host
from serving.agent_reports import MemoryReport, OutsideMemory

TREND_EVERY = timedelta(minutes=5)  # a trend point per revision and device at most this often
TREND_KEEP = 1000  # trend points a host keeps (the newest): days of a few revisions at 5 minutes


def _when(report: MemoryReport) -> datetime:
    return datetime.fromtimestamp(float(report.ts), tz=UTC) if report.ts is not None else timezone.now()


@transaction.atomic
def measured_memory_record(*, host: Host, report: MemoryReport) -> int:
    """Store one `memory` report (checked by deployments.agent_api.bodies.memory); answers how
    many engine readings were kept. Readings for revisions that are not this host's are left out."""
    when = _when(report)
    engines = [e for e in report.engines if e.revision_id.isdigit()]
    revisions = {
        r.pk: r
        for r in DeploymentRevision.objects.select_related("host", "model_variant").filter(
            host=host, pk__in=[int(e.revision_id) for e in engines]
        )
    }
    # Only these rows, in one order: the model's ordering ("revision", then the revision's own:
    # its host's name) joined the revision and host tables into the query, and FOR UPDATE without
    # OF locked their rows too: this host's row held FOR UPDATE by a memory report deadlocked
    # against the probe and the heartbeat, which lock or update that row first. The host row is
    # only KEY SHARE-locked at commit (the deferred foreign-key checks of the rows written here).
    mine = MeasuredMemory.objects.select_for_update(of=("self",)).filter(revision__in=revisions)
    rows = {(m.revision_id, m.device): m for m in mine.order_by("revision_id", "device")}
    reported = {
        (int(e.revision_id), device) for e in engines if int(e.revision_id) in revisions for device in e.devices
    }
    if new := sorted(reported - rows.keys()):
        # A reading's first report inserts its row; two at once (the agent sent it again while the
        # first was still being written) both found none, and the second's INSERT failed on
        # measured_memory_once: its telemetry answered 500. ON CONFLICT DO NOTHING waits for the
        # other's row and keeps it; both then lock the rows and count their reading on them.
        MeasuredMemory.objects.bulk_create(
            [
                MeasuredMemory(
                    revision_id=pk,
                    device=device,
                    latest_bytes=0,
                    latest_at=when,
                    peak_bytes=0,
                    peak_at=when,
                    readings=0,
                )
                for pk, device in new
            ],
            ignore_conflicts=True,
        )
        rows = {(m.revision_id, m.device): m for m in mine.order_by("revision_id", "device")}
    trended = {
        (p["revision_id"], p["device"]): p["last"]
        for p in PlannerErrorPoint.objects.filter(host=host, revision__in=revisions)
        .values("revision_id", "device")
        .annotate(last=Max("ts"))
    }
    kept = 0
    for entry in engines:
        revision = revisions.get(int(entry.revision_id))
        if revision is None:
            continue
        planned: dict[str, int] | None = None
        for device, size in sorted(entry.devices.items()):
            key = (revision.pk, device)
            row = rows[key]
            due = key not in trended or when - trended[key] >= TREND_EVERY
            if row.readings == 0 or due:  # its first reading, or a trend point
                planned = planned if planned is not None else revision_memory(revision).devices  # the pages say why not
            row.latest_bytes, row.latest_at, row.readings = size, when, row.readings + 1
            if size > row.peak_bytes:
                row.peak_bytes, row.peak_at = size, when
            if planned is not None:
                row.planned_bytes = planned.get(device)
            row.save()
            kept += 1
            if due and row.planned_bytes:
                PlannerErrorPoint.objects.create(
                    host=host,
                    revision=revision,
                    device=device,
                    ts=when,
                    planned_bytes=row.planned_bytes,
                    measured_bytes=size,
                )
    _prune(host)
    _outside_replace(host, report.outside, when)
    return kept


def _prune(host: Host) -> None:
    old = PlannerErrorPoint.objects.filter(host=host).order_by("-ts").values_list("pk", flat=True)[TREND_KEEP:]
    doomed = list(old[:TREND_KEEP])
    if doomed:
        PlannerErrorPoint.objects.filter(pk__in=doomed).delete()


def _outside_replace(host: Host, rows: tuple[OutsideMemory, ...], when: datetime) -> None:
    """The host's outside processes are what this report says, nothing older."""
    OutsideProcess.objects.filter(host=host).delete()
    OutsideProcess.objects.bulk_create(
        OutsideProcess(
            host=host,
            pid=row.pid,
            name=row.name[:64],
            gpu_index=row.gpu,
            bytes=row.bytes,
            seen_at=when,
        )
        for row in rows
    )
