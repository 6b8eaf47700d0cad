"""The command line, end to end through the real agent: revision, switch, bench."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from deployments.models import BenchmarkRun, DeploymentRevision, ModelVariant

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_revision_switch_and_bench_from_the_command_line(lab):
    host = lab["host"].name
    model = lab["gemma"].name
    number = run(
        "revision",
        "create",
        "--host",
        host,
        "--engine",
        "llama.cpp",
        "--model",
        model,
        "--set",
        "ctx_size=2048",
        "--set",
        "parallel=2",
        "--set",
        "n_gpu_layers=0",
        "--served-name",
        "gemma",
        "--port",
        str(lab["port"]),
        "--message",
        "gemma, two slots",
    ).strip()
    assert number == "1"
    child = run(
        "revision", "create", "--host", host, "--from", "1", "--set", "ctx_size=4096", "--message", "more context"
    ).strip()
    second = DeploymentRevision.objects.get(host__name=host, number=int(child))
    assert second.parent.number == 1
    assert second.knobs == {"ctx_size": 4096, "parallel": 2, "n_gpu_layers": 0}
    assert "r2" in run("revision", "list", "--host", host)
    assert "--ctx-size 4096" in run("revision", "show", "--host", host, "2")

    out = run("switch", "--host", host, "--revision", "2", "--wait", "--timeout", "120")
    assert f"{host} serves r2" in out
    assert "[ready]" in out

    data = json.loads(
        run(
            "bench",
            "--host",
            host,
            "--concurrency",
            "1,2",
            "--input-tokens",
            "64",
            "--output-tokens",
            "24",
            "--requests",
            "4",
            "--goodput",
            "ttft:600000",
            "tpot:600000",
            "--json",
            "--timeout",
            "300",
        )
    )
    assert data["status"] == "completed"
    assert [lvl["concurrency"] for lvl in data["levels"]] == [1, 2]
    for level in data["levels"]:
        assert level["completed"] == 4 and level["failed"] == 0
        assert level["ttft_ms"]["p50"] < level["e2e_ms"]["p50"]
        assert set(level["tpot_ms"]) == {"mean", "p50", "p90", "p99"}
        assert level["output_tokens_per_s"] > 0
        # Targets every request meets (ten minutes): goodput equals the request rate.
        assert level["goodput_requests_per_s"] == pytest.approx(level["requests_per_s"])
    assert data["energy_j"] is None  # a CPU-only host: energy unknown, never 0
    run_row = BenchmarkRun.objects.get(pk=data["id"])
    assert run_row.revision == second and run_row.status == "completed"
    # The runner's decode rate agrees with llama-server's own clock for the same requests.
    for record in run_row.raw:
        server = record["server_timings"]["predicted_per_second"]
        ours = 1000.0 / record["tpot_ms"]
        assert ours == pytest.approx(server, rel=0.15), record


def test_switch_exit_codes(lab):
    host = lab["host"].name
    lab["rev"]("good", 2048)
    assert "serves r1" in run("switch", "--host", host, "--revision", "1", "--wait", "--timeout", "120")

    # A file that is there but is no model (a missing one is refused before anything is stopped).
    garbage = lab["tmp"] / "none.gguf"
    garbage.write_bytes(b"not a GGUF file\n" * 64)
    missing = ModelVariant.objects.create(name="not-a-model", format="gguf", gguf_file=str(garbage))
    lab["rev"]("broken", 2048, model=missing)
    with pytest.raises(CommandError) as rolled_back:
        run("switch", "--host", host, "--revision", "2", "--wait", "--timeout", "120")
    assert rolled_back.value.returncode == 3

    gone = ModelVariant.objects.create(name="not-on-disk", format="gguf", gguf_file=str(lab["tmp"] / "gone.gguf"))
    lab["rev"]("weights not there", 2048, model=gone)
    with pytest.raises(CommandError) as refused:
        run("switch", "--host", host, "--revision", "3", "--wait", "--timeout", "120")
    assert refused.value.returncode == 5, "refused on the host before anything was stopped"
    assert "not touched" in str(refused.value) or "before anything" in str(refused.value)

    with pytest.raises(CommandError) as bad:
        run("switch", "--host", host, "--revision", "99")
    assert bad.value.returncode == 2
