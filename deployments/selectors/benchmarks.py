"""Reads for benchmark comparisons: the run a new one is held against."""

from __future__ import annotations

from deployments.models import BenchmarkRun


def previous_benchmark_run(run: BenchmarkRun) -> BenchmarkRun | None:
    """The run to hold a new one against: the latest completed run, with exactly the same
    profile, of the revision the host was benchmarked on before this one (whatever its number:
    after a switch back to an older revision, the one it replaced)."""
    revision = run.revision
    candidates = (
        BenchmarkRun.objects.filter(
            revision__host_id=revision.host_id,
            profile_name=run.profile_name,
            status="completed",
            created_at__lt=run.created_at,
        )
        .exclude(revision_id=revision.pk)
        .select_related("revision")
        .order_by("-created_at")[:20]
    )
    return next((c for c in candidates if c.profile == run.profile), None)
