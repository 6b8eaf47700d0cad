"""Under the strict Content-Security-Policy (tests/test_csp.py checks the header), the panel's
pages still work in real Chromium, and the browser reports nothing: no policy violation, no
console message, no page error, no request to another origin. An admin opens each main page;
the live parts still run: the dashboard's poll swaps a card, the planner follows the form as
you type, the API docs (Swagger UI from the panel's own static files) list the operations."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from api.tokens import token_create
from deployments.models import Deployment, ModelVariant
from hardware.models import GPU, GpuSample, Host
from notifications.models import Channel, Rule
from notifications.secrets import url_encrypt
from tests.deployments.test_views_benchmarks import record_run
from tests.support.revisions import make_revision

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every violation the page sees, as the browser reports it to the page itself.
WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.effectiveDirective + " blocked " + (e.blockedURI || "inline")
                    + " at " + e.sourceFile + ":" + e.lineNumber);
});
"""


def without_planned_aborts(messages: list[str]) -> list[str]:
    """The planner drops its request in flight when the form changes again (hx-sync="this:replace"),
    and htmx logs every abort as an error: htmx:afterRequest then htmx:sendAbort. Those pairs are
    by design; any other message is reported."""
    kept: list[str] = []
    for message in messages:
        if message.startswith("error: htmx:sendAbort,") and kept and kept[-1].startswith("error: htmx:afterRequest,"):
            kept.pop()
        else:
            kept.append(message)
    return kept


@pytest.fixture
def lab(catalog: None, admin_user: User) -> Host:
    """An online host with two GPUs and their telemetry, two revisions (r2 served), two finished
    benchmarks, a notification channel and rule, and an API token for the admin."""
    now = timezone.now()
    host = Host.objects.create(name="rig", queue="host.rig", nvml_available=True, last_heartbeat=now)
    gpus = [
        GPU.objects.create(host=host, index=i, name="NVIDIA H200", memory_bytes=141 * 1024**3, power_limit_w=700)
        for i in (0, 1)
    ]
    GpuSample.objects.bulk_create(
        GpuSample(
            gpu=g,
            ts=now - timezone.timedelta(minutes=m),
            util_pct=40 + m,
            mem_used_bytes=(50 + m) * 1024**3,
            power_w=300 + m,
            temp_c=55,
        )
        for g in gpus
        for m in range(0, 30, 3)
    )
    variant = ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL")
    r1 = make_revision(
        host=host, engine="llama.cpp", model_variant=variant, knobs={"ctx_size": 4096}, message="one", actor=admin_user
    )
    r2 = make_revision(
        host=host, engine="llama.cpp", model_variant=variant, knobs={"ctx_size": 8192}, message="two", actor=admin_user
    )
    Deployment.objects.create(host=host, active_revision=r2)
    record_run(r1)
    record_run(r2, speed=1.5)
    channel = Channel.objects.create(
        name="ops", scheme="json", service="JSON", url_ciphertext=url_encrypt("json://127.0.0.1:9/")
    )
    Rule.objects.create(channel=channel, host=host, events=["switch.failed"])
    token_create(user=admin_user, name="ci", actor=admin_user)
    return host


def test_every_main_page_works_under_the_policy_with_nothing_reported(live_server: Any, page: Any, lab: Host) -> None:
    from playwright.sync_api import expect

    from deployments.models import BenchmarkRun

    base = live_server.url
    console: list[str] = []
    errors: list[str] = []
    elsewhere: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text} ({page.url})"))
    page.on("pageerror", lambda e: errors.append(f"{e} ({page.url})"))
    page.on("request", lambda r: None if r.url.startswith(base) else elsewhere.append(r.url))
    page.add_init_script(WATCH)

    def visit(url: str) -> None:
        response = page.goto(base + url)
        assert response is not None and response.status == 200, url
        assert "script-src 'self'" in (response.header_value("content-security-policy") or ""), url

    def nothing_reported(where: str) -> None:
        page.wait_for_load_state("networkidle")
        violations = page.evaluate("window.__csp")
        assert violations == [], (where, violations)
        assert without_planned_aborts(console) == [] and errors == [] and elsewhere == [], (
            where,
            console,
            errors,
            elsewhere,
        )

    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "pw-ada")
    page.click("button[type=submit]")
    expect(page.locator('article[data-host="rig"]')).to_contain_text("util 40%")
    expect(page.locator('article[data-host="rig"] .bar span.w40')).to_have_count(2)
    # The bars are drawn by their classes: a 40% bar is 40% as wide as its track.
    ratio = page.evaluate(
        "(() => { const s = document.querySelector('article[data-host=rig] .bar.util span');"
        " return s.getBoundingClientRect().width / s.parentElement.getBoundingClientRect().width; })()"
    )
    assert 0.38 < ratio < 0.42, ratio

    # The dashboard's poll still swaps what changed.
    GpuSample.objects.create(gpu=lab.gpus.get(index=1), ts=timezone.now(), util_pct=88, mem_used_bytes=1, power_w=650)
    Host.objects.filter(pk=lab.pk).update(last_heartbeat=timezone.now())
    expect(page.locator('article[data-host="rig"]')).to_contain_text("util 88%", timeout=15_000)
    nothing_reported("dashboard cards")

    visit("/?view=table")
    expect(page.locator("#host-row-rig")).to_contain_text("2× H200")
    nothing_reported("dashboard table")

    visit(reverse("hardware:host_detail", args=["rig"]))
    expect(page.locator("#telemetry svg.chart").first).to_be_visible()
    visit(reverse("deployments:engine_log", args=["rig"]))
    nothing_reported("host page, engine log")

    visit(reverse("deployments:revision_detail", args=["rig", 2]))
    expect(page.locator("main")).to_contain_text("ctx_size")
    nothing_reported("revision page")

    # The new revision form: the live planner follows what is typed.
    visit(reverse("deployments:revision_new", args=["rig"]))
    page.select_option("select[name=model_variant]", label="Qwen3.5-122B-A10B-Q6_K_XL")
    page.select_option("select[name=engine]", "llama.cpp")
    page.fill("textarea[name=knobs]", "ctx_size=4096")
    expect(page.locator("#planner pre.argv")).to_contain_text("--ctx-size 4096")
    page.fill("textarea[name=knobs]", "ctx_size=12288")
    expect(page.locator("#planner pre.argv")).to_contain_text("--ctx-size 12288")
    nothing_reported("new revision form")

    visit(reverse("deployments:revision_diff_pick", args=["rig"]))
    visit(reverse("deployments:revision_diff", args=["rig", 1, 2]))
    expect(page.locator("main")).to_contain_text("8192")
    nothing_reported("diff")

    a, b = BenchmarkRun.objects.order_by("pk").values_list("pk", flat=True)
    visit(reverse("deployments:benchmark_list", args=["rig"]))
    visit(reverse("deployments:benchmark_detail", args=[b]))
    expect(page.locator("svg.chart").first).to_be_visible()
    visit(reverse("deployments:benchmark_compare", args=[a, b]))
    expect(page.locator("svg.chart").first).to_be_visible()
    nothing_reported("benchmarks")

    visit(reverse("notifications:index"))
    expect(page.locator("main")).to_contain_text("ops")
    visit(reverse("people:list"))
    visit(reverse("people:detail", args=["ada"]))
    visit(reverse("api_tokens:list"))
    expect(page.locator("main")).to_contain_text("ci")
    visit(reverse("deployments:audit_log"))
    visit(reverse("deployments:model_list"))
    nothing_reported("notifications, people, tokens, audit log, models")

    # The API docs: Swagger UI renders the operations from the panel's own files.
    visit("/api/v1/docs")
    expect(page.locator(".opblock").first).to_be_visible(timeout=30_000)
    assert page.locator(".opblock").count() > 10
    nothing_reported("API docs")
