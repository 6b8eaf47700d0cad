"""The whole web flow in real Chromium against a live server and a real host agent running the
real llama-server with Gemma 3 270M: sign in, record a revision with the live planner (which
warns first), switch the host from the revision page and watch the operation finish, open the
diff between two revisions, start a benchmark and see its plots."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import NoReverseMatch, reverse

from deployments.models import active_revision_of
from tests.browser.chromium import snap
from tests.browser.pages import start_custom_benchmark

pytestmark = [
    pytest.mark.browser,
    pytest.mark.engine,
    pytest.mark.celery,
    pytest.mark.django_db(transaction=True),
]


def gemma_with_header_facts(gemma: Any) -> None:
    """Give the lab's Gemma variant the facts of its real GGUF header (native context 32,768)."""
    from deployments.importers.gguf_header import read_gguf_header

    header = read_gguf_header(gemma.gguf_file)
    gemma.arch = header.arch.to_dict()
    gemma.gguf_kv = header.kv.to_dict()
    gemma.weights_bytes = header.file_size
    gemma.save()


def test_revision_switch_diff_and_benchmark_in_the_browser(live_server, lab, page):
    from playwright.sync_api import expect

    from deployments.models import BenchmarkRun, DeploymentRevision
    from tests.support.revisions import make_revision

    host, gemma, port = lab["host"], lab["gemma"], lab["port"]
    gemma_with_header_facts(gemma)
    base = live_server.url

    # Sign in as the operator.
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "pw-otto")
    page.click("button[type=submit]")
    expect(page.locator(f'article[data-host="{host.name}"]')).to_contain_text("online")

    # A new revision through the form; the live planner warns about a context beyond the native window.
    try:
        new_url = reverse("deployments:revision_new", kwargs={"host": host.name})
    except NoReverseMatch:
        new_url = None
    if new_url:
        page.goto(base + new_url)
        page.select_option("select[name=model_variant]", label=f"{gemma.name} (completions)")  # a base model
        page.select_option("select[name=engine]", "llama.cpp")
        page.fill("textarea[name=knobs]", "ctx_size=65536\nparallel=1\nn_gpu_layers=0")
        page.fill("input[name=served_name]", "gemma")
        page.fill("input[name=port]", str(port))
        page.fill("textarea[name=message]", "gemma, 2k context")
        warning = page.locator("#planner .finding.warning", has_text="context.beyond_native")
        expect(warning).to_be_visible()
        expect(warning).to_contain_text("32,768")
        snap(page, "revision-new-warning")
        page.fill("textarea[name=knobs]", "ctx_size=2048\nparallel=1\nn_gpu_layers=0")
        expect(warning).to_have_count(0)
        page.click("#revision-form button[type=submit]")
        expect(page).to_have_url(re.compile(rf"/hosts/{host.name}/revisions/1/$"))
        first = DeploymentRevision.objects.get(host=host, number=1)
        assert first.knobs["ctx_size"] == 2048 and first.knobs["parallel"] == 1
        assert first.author.username == "otto"
    else:  # the new-revision page is not there yet: record it through the service
        lab["rev"]("gemma, 2k context", 2048)
    second = lab["rev"]("gemma, 4k context", 4096)
    assert second.number == 2

    # Switch from the revision page; the operation page shows the progress until it ends.
    page.goto(base + reverse("deployments:revision_detail", args=[host.name, 2]))
    page.get_by_role("button", name=re.compile(r"Switch .* to r2")).click()
    page.get_by_role("button", name="Switch now").click()
    expect(page).to_have_url(re.compile(r"/operations/[0-9a-f-]+/$"))
    expect(page.locator("#op-status progress")).to_be_visible()
    expect(page.locator("#op-status .badge")).to_have_text("Succeeded", timeout=120_000)
    host.refresh_from_db()
    assert active_revision_of(host) == second

    # The diff between the two revisions.
    page.goto(base + reverse("deployments:revision_diff", args=[host.name, 1, 2]))
    expect(page.locator("main")).to_contain_text("ctx_size")
    expect(page.locator("main")).to_contain_text("4096")

    # The dashboard card shows what the host serves now.
    page.goto(base + "/")
    expect(page.locator(f'article[data-host="{host.name}"]')).to_contain_text("r2")
    snap(page, "dashboard")

    # A benchmark from the host page: custom numbers, progress, then the results with plots.
    page.goto(base + reverse("hardware:host_detail", args=[host.name]))
    expect(page.locator("#telemetry")).to_contain_text("No GPU telemetry")  # a CPU-only lab host
    snap(page, "host")
    page.get_by_role("link", name="Benchmark this host…").click()
    page.select_option("select[name=profile]", "custom")
    page.fill("input[name=concurrency]", "1,x")
    page.click("form.benchmark-form button[type=submit]")
    expect(page.locator("label[for=id_concurrency] .errorlist")).to_contain_text("not a whole number")
    start_custom_benchmark(page, concurrency="1,2", input_tokens=32, output_tokens=8, requests=2)
    expect(page).to_have_url(re.compile(r"/benchmarks/\d+/$"), timeout=120_000)
    run = BenchmarkRun.objects.get(revision=second)
    assert run.status == "completed", run.results
    expect(page.locator("figure[data-chart=throughput] svg g.series")).to_have_count(2)
    expect(page.locator("figure[data-chart=timeline] svg g.series")).to_have_count(2)
    assert page.locator("svg.chart").count() == 6
    expect(page.locator("main")).to_contain_text("vllm bench serve")
    snap(page, "benchmark")

    # Not what the host serves: the form says so and nothing starts.
    make_revision(
        host=host, engine="llama.cpp", model_variant=gemma, knobs={"ctx_size": 1024}, message="unused", actor=None
    )
    page.goto(base + reverse("deployments:benchmark_new", args=[host.name]) + "?revision=3")
    page.click("form.benchmark-form button[type=submit]")
    expect(page.locator(".errorlist.nonfield")).to_contain_text("is not what")
    assert BenchmarkRun.objects.filter(revision__host=host).count() == 1
