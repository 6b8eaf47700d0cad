"""A tuning run's page follows the run live in a real browser: started from the form, each trial's
row moves from switching to measuring to measured (or ruled out by the limit) as its operations end,
the Pareto plot fills, and at the end the verdict, the best trial's diff and the button that
switches to it appear without a reload; the button queues the switch. The operations end as the
agent API reports them (operation_host_begin, operation_host_finish with the benchmark's figures;
no agent or engine runs here: the services' tests and the end-to-end sweep measure for real), and
what follows each end (operation_ended after the commit, the run's next step) runs as in the panel."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from deployments.choices import OperationKind
from deployments.models import Operation
from deployments.services.host_reports import operation_host_begin, operation_host_finish
from tests.browser.test_csp_browser import WATCH
from tests.tuning.test_tuning_services import LEVEL, host  # noqa: F401 - the fixture
from tuning.models import TuningRun

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# What each benchmark measures: (trial number, round) -> (output tok/s, TTFT ms). Trial 2 breaks the
# form's limit (TTFT p95 <= 500 ms); trial 1 beats the base by far more than the rounds' spread.
FIGURES = {
    (0, 0): (50.0, 300.0),
    (1, 0): (80.0, 250.0),
    (2, 0): (95.0, 900.0),
    (1, 1): (82.0, 240.0),
    (0, 1): (52.0, 310.0),
}


def _step(run: TuningRun) -> bool:
    """End the operation the run waits for, as its agent would; False when it waits for none."""
    run.refresh_from_db()
    op = run.current_op
    if op is None:
        return False
    operation_host_begin(host=op.host, op_id=op.pk, worker="test")
    benchmark = None
    if op.kind == OperationKind.BENCHMARK:
        trial = run.current_trial
        throughput, ttft = FIGURES[(trial.number, len(trial.rounds))]
        requests = [{"ok": True, "level": LEVEL, "ttft_ms": ttft, "e2e_ms": 900.0, "output_tokens": 48}] * 4
        level = {
            "label": LEVEL,
            "completed": 4,
            "output_tokens_per_s": throughput,
            "decode_tokens_per_s": {"mean": 40.0},
        }
        benchmark = {"status": "completed", "levels": [{**level, "requests": requests}]}
    operation_host_finish(op=op, state="succeeded", result={}, error="", benchmark=benchmark)
    return True


def test_the_tuning_page_follows_the_run_live(live_server: Any, page: Any, operator: User, host: Any) -> None:  # noqa: F811
    from playwright.sync_api import expect

    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script(WATCH)  # the page reports any Content-Security-Policy violation to itself
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "pw-otto")
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/hosts/{host.name}/")
    page.click("#host-tune")
    page.fill("input[name=space__parallel]", "2,4")
    page.fill("input[name=limits]", "ttft_p95<=500")
    page.select_option("select[name=profile]", "custom")
    for name, value in (("concurrency", "4"), ("requests", "4"), ("input_tokens", "12"), ("output_tokens", "48")):
        page.fill(f"input[name={name}]", value)
    for name, value in (("max_trials", "2"), ("repeats", "2"), ("repeat_best", "1")):
        page.fill(f"input[name={name}]", value)
    page.click("#tuning-start")

    def row(number: int) -> Any:
        return page.locator(f'tr.tuning-trial[data-number="{number}"]')

    expect(page.locator("#tuning-state")).to_have_text("Running")
    expect(row(0)).to_have_attribute("data-state", "measuring")
    run = TuningRun.objects.get()

    _step(run)  # the base's benchmark: the first candidate is derived, planned and switched to
    expect(row(0)).to_have_attribute("data-state", "measured", timeout=10_000)
    expect(row(1)).to_have_attribute("data-state", "switching")
    expect(row(1)).to_contain_text("parallel=2")
    _step(run)  # its switch
    expect(row(1)).to_have_attribute("data-state", "measuring", timeout=10_000)
    _step(run)  # its benchmark
    expect(row(1)).to_have_attribute("data-state", "measured", timeout=10_000)
    expect(page.locator("#tuning-done")).to_have_text("1 of 2")
    _step(run)
    _step(run)  # trial 2: switched to, then its first round breaks the limit
    expect(row(2)).to_have_attribute("data-state", "ruled_out", timeout=10_000)
    expect(row(2)).to_contain_text("measured 900")
    ttft = page.locator('figure[data-axis="ttft_p95"]')
    expect(ttft.locator('g[data-series="Pareto front"] circle')).not_to_have_count(0)
    expect(ttft.locator('g[data-series="base"] circle')).to_have_count(1)

    while _step(run):  # the repeats of trial 1 and the base; the host serves the base again at the end
        pass
    expect(page.locator("#tuning-state")).to_have_text("Finished", timeout=10_000)
    expect(page.locator("#tuning-winner")).to_contain_text("beyond noise")
    expect(page.locator("#tuning-diff")).to_contain_text("parallel")
    expect(page.locator("#tuning-cancel")).to_have_count(0)
    best = TuningRun.objects.get().best.revision
    button = page.locator("#tuning-propose")
    expect(button).to_have_text(f"Switch {host.name} to r{best.number}")
    button.click()
    page.click("#confirm-dialog .confirm-yes")
    page.wait_for_url("**/operations/**")
    switch = Operation.objects.get(kind=OperationKind.SWITCH, revision=best, state="queued")
    assert page.url == f"{live_server.url}/operations/{switch.pk}/"
    assert page.evaluate("window.__csp") == [] and errors == [] and page.native_dialogs == []
