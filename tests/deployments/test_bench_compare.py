"""Comparing benchmark runs honestly: a run whose numbers differ from its profile's is labelled
custom everywhere it is listed and compared (and never compared as that profile), and a
comparison shows each side's sample size and says when a change is within the runs' own noise."""

from __future__ import annotations

import pytest
from django.urls import reverse

from deployments.models import BenchmarkRun, Operation, active_revision_of
from deployments.selectors.revision_views import benchmark_items
from deployments.services.benchmarks import benchmark_compare, benchmark_run_record
from serving.benchmarking.profiles import PROFILES, profile_label
from serving.benchmarking.results import RequestRecord, RunResult, build_level
from serving.benchmarking.stats import rank_sum_z, within_noise
from serving.diffing.benchmarks import benchmark_sections
from tests.deployments.test_views_benchmarks import served  # noqa: F401 - the host fixture

pytestmark = pytest.mark.django_db

TTFT = [100.0, 120.0, 90.0, 110.0, 105.0, 95.0, 115.0, 98.0]  # ms, one per request: a real run's scatter


def run_of(revision, *, profile: dict, ttft: list[float]) -> BenchmarkRun:
    """A finished single-level run (c=1) whose requests took these times to the first token."""
    op = Operation.objects.create(kind="benchmark", host=revision.host, revision=revision, state="succeeded")
    run = BenchmarkRun.objects.create(
        revision=revision, operation=op, profile_name=profile["name"], profile=profile, engine=revision.engine
    )
    records = [
        RequestRecord(start_ms=0.0, ok=True, ttft_ms=t, e2e_ms=t + 315.0, input_tokens=128, output_tokens=64)
        for t in ttft
    ]
    level = build_level(records, label="c=1", duration_s=len(ttft) * 0.4, requested=len(ttft), concurrency=1)
    result = RunResult(profile=profile, status="completed", model="m", levels=[level], duration_s=1.0)
    return benchmark_run_record(run=run, result=result.to_dict())


def quick(**changes) -> dict:
    return {**PROFILES["quick"].to_dict(), **changes}


def test_profile_label_names_the_numbers_that_differ():
    assert profile_label(quick()) == "quick"
    assert profile_label(quick(concurrency=[1], num_requests=8)) == "quick (custom: c=1)"
    assert profile_label(quick(concurrency=[1, 2], input_tokens=512)) == "quick (custom: c=1,2 in=512)"
    assert profile_label({"name": "custom", "concurrency": [2], "num_requests": 4}) == "custom (c=2 n=4)"
    assert profile_label({"name": "quick"}) == "quick"  # an older run that kept only the name


def test_a_run_with_custom_numbers_is_labelled_so_everywhere_and_not_compared_as_the_profile(
    client,
    viewer,
    served,  # noqa: F811
):
    r1, r2 = served.revisions.get(number=1), active_revision_of(served)
    named = run_of(r1, profile=quick(), ttft=TTFT)
    custom = run_of(r2, profile=quick(concurrency=[1]), ttft=TTFT)
    assert custom.profile_label == "quick (custom: c=1)"
    client.force_login(viewer)
    for url in (
        reverse("deployments:benchmark_list", args=["bench-host"]),
        reverse("deployments:benchmark_detail", args=[custom.pk]),
        reverse("hardware:host_detail", args=["bench-host"]),
        reverse("deployments:revision_detail", args=["bench-host", 2]),
    ):
        assert "quick (custom: c=1)" in client.get(url).content.decode(), url
    page = client.get(reverse("deployments:benchmark_compare", args=[named.pk, custom.pk])).content.decode()
    assert "Different loads: A ran <code>quick</code>, B ran <code>quick (custom: c=1)</code>" in page
    # The revision diff holds runs of the same profile side by side: these two are not.
    assert benchmark_sections(benchmark_items(r1), benchmark_items(r2)) == ()
    same = run_of(r2, profile=quick(), ttft=TTFT)
    assert [s.title for s in benchmark_sections(benchmark_items(r1), benchmark_items(r2))] == ["Benchmark quick"]
    page = client.get(reverse("deployments:benchmark_compare", args=[named.pk, same.pk])).content.decode()
    assert "Different loads" not in page


def test_rank_sum_and_noise_rules():
    assert rank_sum_z([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2.6112, abs=1e-4)  # scipy's U=25
    assert rank_sum_z([1, 2], [3, 4]) is None  # too few to tell
    assert within_noise(100.0, 103.0, samples_a=TTFT, samples_b=[t * 1.03 for t in TTFT]) is True
    assert within_noise(100.0, 200.0, samples_a=TTFT, samples_b=[t * 2 for t in TTFT]) is False
    assert within_noise(100.0, 104.0, spread=10.0) is True  # no samples: the p50..p90 spread
    assert within_noise(100.0, 130.0, spread=10.0) is False
    assert within_noise(100.0, 130.0) is None


def test_compare_shows_sample_sizes_and_flags_a_change_within_noise(client, viewer, served):  # noqa: F811
    r1, r2 = served.revisions.get(number=1), active_revision_of(served)
    base = run_of(r1, profile=quick(), ttft=TTFT)
    slightly = run_of(r2, profile=quick(), ttft=[t * 1.04 for t in TTFT])  # 4 % slower: inside the scatter
    twice = run_of(r2, profile=quick(), ttft=[t * 2 for t in TTFT])
    rows = {r["metric"]: r for r in benchmark_compare(base, slightly)}
    assert rows["TTFT p50 ms"]["noise"] is True and (rows["TTFT p50 ms"]["n_a"], rows["TTFT p50 ms"]["n_b"]) == (8, 8)
    assert rows["TTFT p50 ms"]["noise_basis"] == "rank-sum test on 8 + 8 requests"
    rows = {r["metric"]: r for r in benchmark_compare(base, twice)}
    assert rows["TTFT p50 ms"]["noise"] is False
    # Without the per-request timings (an older run), the p50..p90 spread decides.
    BenchmarkRun.objects.filter(pk__in=[base.pk, slightly.pk]).update(raw=[])
    base.refresh_from_db()
    slightly.refresh_from_db()
    rows = {r["metric"]: r for r in benchmark_compare(base, slightly)}
    assert rows["TTFT p50 ms"]["noise"] is True and rows["TTFT p50 ms"]["noise_basis"] == "the runs' p50..p90 spread"

    client.force_login(viewer)
    page = client.get(reverse("deployments:benchmark_compare", args=[base.pk, slightly.pk])).content.decode()
    assert "completed · 8 requests" in page and "n=8 / 8" in page
    assert "within noise</span>" in page
    page = client.get(reverse("deployments:benchmark_compare", args=[base.pk, twice.pk])).content.decode()
    ttft_row = page.split("TTFT p50 ms", 1)[1].split("</tr>", 1)[0]
    assert "+100%" in ttft_row and "within noise" not in ttft_row
