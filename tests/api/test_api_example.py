"""The API page's automation example (docs/api.md), run as a user runs it: examples/switch_and_benchmark.py in its
own process, talking to the panel (the live server on the real PostgreSQL) with a personal token,
while a real agent switches a real llama-server (Gemma 3 270M) and benchmarks it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from api.tokens import token_create
from deployments.models import BenchmarkRun, active_revision_id_of
from deployments.services.switch import switch_request
from hardware.models import Host
from tests.support.operations import wait_done

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "switch_and_benchmark.py"


def test_the_api_page_links_the_example_that_exists():
    """docs/api.md links the script (one copy of it, the one the tests below run)."""
    page = (ROOT / "docs" / "api.md").read_text()
    assert SCRIPT.is_file() and f"(../{SCRIPT.relative_to(ROOT)})" in page


SMALL = ("--concurrency", "1", "--requests", "3", "--input-tokens", "32", "--output-tokens", "16")


def _run(live_server, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTROLPANEL_URL": live_server.url, "CONTROLPANEL_TOKEN": token}
    try:
        return subprocess.run(
            [sys.executable, str(SCRIPT), *args, *SMALL], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the example did not finish: {exc.stdout!r} {exc.stderr!r}") from None


def test_switch_benchmark_compare_and_fail_on_a_regression(lab, live_server, operator: User) -> None:
    host: Host = lab["host"]
    r1 = lab["rev"]("baseline", 2048)
    r2 = lab["rev"]("more context", 4096)
    assert wait_done(switch_request(revision=r1, actor=operator)).state == "succeeded"
    token = token_create(user=operator, name="ci", actor=operator).secret
    name = host.name

    # No run on r1 yet: the script benchmarks r1 first, switches, benchmarks r2 and compares. On a
    # busy 2-core box TTFT alone can move several-fold between two runs of the same model, so the
    # pass path allows any change (the failing path below is made certain another way).
    done = _run(live_server, token, "--host", name, "--revision", "2", "--max-drop", "100")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"switching {name} from r1 to r2" in done.stdout
    assert "output tok/s" in done.stdout and "no slower than r1" in done.stdout
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == r2.pk
    runs = BenchmarkRun.objects.filter(revision__host=host, status="completed")
    assert sorted(runs.values_list("revision__number", flat=True)) == [1, 2]

    # r2 as a faster machine once measured it (the same profile, 100 times the tokens/s this box
    # makes): the newest run of r2, so the baseline when the script goes back from r2 to r1.
    measured = runs.get(revision=r2)
    BenchmarkRun.objects.create(
        revision=r2,
        profile_name=measured.profile_name,
        profile=measured.profile,
        engine=measured.engine,
        status="completed",
        results={
            "levels": [
                {**lvl, "output_tokens_per_s": lvl["output_tokens_per_s"] * 100} for lvl in measured.results["levels"]
            ]
        },
    )
    failed = _run(live_server, token, "--host", name, "--revision", "1")  # the default 10 %
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "r1 regressed against r2: output tok/s at concurrency 1 -9" in failed.stderr
    assert runs.count() == 4  # one more run (r1 again), no new baseline
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == r1.pk

    # A switch the panel refuses ends the script with status 2 and the panel's sentence.
    missing = _run(live_server, token, "--host", name, "--revision", "9")
    assert missing.returncode == 2 and "has no revision r9" in missing.stderr
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == r1.pk
