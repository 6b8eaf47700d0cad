"""Every kind of bad input to the management commands ends in exit status 2 with one line on
stderr (a CommandError), never a traceback, and stores nothing: unknown users, users whose
role is too low, absurd or non-ASCII numbers, inf/nan, NUL and NaN inside --set values, and
numbers that would make the planner allocate without bound."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from core.models import AuditEvent
from deployments.models import DeploymentRevision, ModelVariant, Operation, Secret
from hardware.models import GPU, Host
from tests.hardware.factories import GPUFactory, HostFactory
from tests.support.revisions import make_revision

ROOT = Path(__file__).resolve().parents[2]
MODEL = "Qwen3.5-122B-A10B-Q6_K_XL"
HUGE = "99999999999999999999"


@pytest.fixture
def world(catalog: None, operator: Any, viewer: Any) -> Host:
    host = HostFactory(name="h1", model_dirs=["/models"])
    GPUFactory(host=host, index=0)
    GPUFactory(host=host, index=1)
    make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=ModelVariant.objects.get(name=MODEL),
        knobs={"ctx_size": 4096},
        message="first",
        actor=operator,
    )
    return host


def stored() -> tuple[int, ...]:
    return (
        Host.objects.count(),
        GPU.objects.count(),
        DeploymentRevision.objects.count(),
        Operation.objects.count(),
        ModelVariant.objects.count(),
        Secret.objects.count(),
        AuditEvent.objects.count(),
    )


def refused(*args: str, argparse: bool = False) -> str:
    """Run a command that must refuse its input; return the one-line message."""
    before = stored()
    with pytest.raises(CommandError) as exc:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    message = str(exc.value)
    assert "\n" not in message, message
    assert exc.value.returncode == 2, (exc.value.returncode, message)
    if argparse:  # refused by the argument's type, before anything runs
        assert message.startswith("Error: argument"), message
    assert stored() == before
    return message


REVISION = ("revision", "create", "--host", "h1", "--message", "m")
VLLM = (*REVISION, "--engine", "vllm", "--model", MODEL)


# --- users and roles ----------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args",
    [
        (*REVISION, "--from", "1"),
        ("switch", "--host", "h1", "--revision", "1"),
        ("bench", "--host", "h1", "--profile", "quick"),
        ("engine", "install", "--host", "h1", "--engine", "vllm", "--version", "0.11.0"),
        ("engine", "read-again", "--host", "h1", "--engine", "vllm", "--version", "0.11.0"),
    ],
    ids=["revision", "switch", "bench", "engine", "read-again"],
)
def test_a_viewer_is_refused_in_one_line(world, args) -> None:
    message = refused(*args, "--user", "vera")
    assert "operator" in message or "role" in message.lower() or "Permission" in message


@pytest.mark.django_db
def test_reading_again_names_only_a_recorded_install(world) -> None:
    """`engine read-again` takes an engine and a version the host recorded, nothing else: each hostile
    value is refused in one line and queues nothing."""
    read_again = ("engine", "read-again", "--host", "h1", "--user", "otto")
    for engine, version in [("vllm", v) for v in ("", "\x00", "../../etc", "0.33.0; rm -rf /", "9" * 5000)] + [
        ("tgi", "1.0.0"), ("ollama", "latest"), ("VLLM", "0.11.0"), ("vllm\n", "0.11.0"),
    ]:  # fmt: skip
        assert refused(*read_again, "--engine", engine, "--version", version)


@pytest.mark.django_db
def test_an_unknown_user_is_refused(world) -> None:
    assert "No user named" in refused(*REVISION, "--from", "1", "--user", "nobody")


@pytest.mark.django_db
def test_an_operator_cannot_set_secrets(world) -> None:
    import sys as _sys

    old = _sys.stdin
    _sys.stdin = io.StringIO("value\n")
    try:
        refused("secret", "set", "--host", "h1", "K", "--user", "otto")
    finally:
        _sys.stdin = old


# --- numbers -------------------------------------------------------------------------------------------

BAD_INTS = ["²", "٣", "9" * 5000, HUGE, "-1", "1e9", "inf", "nan"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args",
    [
        (*REVISION, "--from", "1", "--port"),
        (*REVISION, "--from"),
        ("revision", "show", "--host", "h1"),
        ("switch", "--host", "h1", "--revision"),
        ("bench", "--host", "h1", "--requests"),
        ("bench", "--host", "h1", "--input-tokens"),
        ("plan", "--model", MODEL, "--engine", "vllm", "--gpu-type", "RTX 3090", "--gpu-count"),
    ],
    ids=["port", "from", "show", "switch", "requests", "input-tokens", "gpu-count"],
)
def test_bad_whole_numbers_are_refused(world, args) -> None:
    for value in BAD_INTS:
        refused(*args, value, argparse=True)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args",
    [
        ("switch", "--host", "h1", "--revision", "1", "--timeout"),
        ("engine", "install", "--host", "h1", "--engine", "vllm", "--timeout"),
        ("bench", "--host", "h1", "--timeout"),
        ("plan", "--model", MODEL, "--engine", "vllm", "--gpu-count", "2", "--gpu-memory-gib"),
    ],
    ids=["switch", "engine", "bench", "gpu-memory"],
)
def test_bad_floats_are_refused(world, args) -> None:
    for value in ["inf", "nan", "-inf", "1e999", "-5", "9" * 5000, "²"]:
        refused(*args, value, argparse=True)


@pytest.mark.django_db
def test_bench_levels_are_bounded(world) -> None:
    for levels in ["1,99999999999", "²", "1," + "9" * 5000, "1,1", "1 2", ",".join(map(str, range(1, 40)))]:
        assert "--concurrency" in refused("bench", "--host", "h1", "--concurrency", levels)


@pytest.mark.django_db
def test_bench_goodput_is_bounded(world) -> None:
    for goal in ["ttft:inf", "ttft:nan", "tpot:1e300", "e2el:-1", "ttft:" + "9" * 5000, "nope:5", "ttft:²"]:
        assert "--goodput" in refused("bench", "--host", "h1", "--goodput", goal)


@pytest.mark.django_db
def test_plan_gpu_count_is_bounded_and_fast(world) -> None:
    started = time.monotonic()
    base = ("plan", "--model", MODEL, "--engine", "vllm", "--gpu-type", "RTX 3090")
    refused(*base, "--gpu-count", HUGE, argparse=True)
    refused(*base, "--gpu-count", "257", argparse=True)
    refused(*base, "--gpu-count", "0", argparse=True)
    refused("plan", "--model", MODEL, "--engine", "vllm", "--gpu-memory-gib", "1e30", "--gpu-count", "2", argparse=True)
    assert time.monotonic() - started < 10


PLAN_SET = [
    "tensor_parallel_size=99999999999",
    "pipeline_parallel_size=1000000000000",
    "tensor_parallel_size=" + "9" * 5000,
    "gpu_memory_utilization=NaN",
    "gpu_memory_utilization=Infinity",
    "gpu_memory_utilization=inf",
    'speculative_config={"method": "ngram", "x": NaN}',
    'speculative_config={"method": "ngram", "x": "a\\u0000b"}',
    "speculative_config=" + '{"a":' * 40 + "1" + "}" * 40,
]


@pytest.mark.django_db
def test_plan_set_values_are_refused_quickly(world) -> None:
    for knob in PLAN_SET:
        started = time.monotonic()
        refused(
            "plan", "--model", MODEL, "--engine", "vllm", "--gpu-type", "RTX 3090", "--gpu-count", "4", "--set", knob
        )
        assert time.monotonic() - started < 10, knob[:40]


def test_planner_itself_bounds_gpus() -> None:
    from serving.planner import GpuSpec, PlanInputError, PlanRequest, plan
    from serving.planner.fit import MAX_GPUS

    arch = ModelVariant(arch={"architecture": "llama", "num_layers": 4}).model_arch
    gpu = GpuSpec(name="g", memory_bytes=24 << 30)
    with pytest.raises(PlanInputError):
        plan(PlanRequest(engine="vllm", gpus=(gpu,) * (MAX_GPUS + 1), arch=arch))
    for knobs in ({"tensor_parallel_size": 10**12}, {"pipeline_parallel_size": 10**12}, {"tp_size": 16, "pp_size": 17}):
        with pytest.raises(PlanInputError):
            plan(
                PlanRequest(engine="vllm" if "tp_size" not in knobs else "sglang", gpus=(gpu,), arch=arch, knobs=knobs)
            )


# --- JSON-ish values on revisions -----------------------------------------------------------------------

SET_VALUES = {
    "nan": 'limit_mm_per_prompt={"image": NaN}',
    "infinity": 'limit_mm_per_prompt={"image": -Infinity}',
    "nul": 'limit_mm_per_prompt={"image": "a\\u0000b"}',
    "nul-text": 'quantization="a\\u0000b"',
    "5000-digits": "max_num_seqs=" + "9" * 5000,
    "huge": "max_num_seqs=" + HUGE,
    "inf-text": "gpu_memory_utilization=inf",
    "deep": "limit_mm_per_prompt=" + '{"a":' * 40 + "1" + "}" * 40,
    "unknown-knob": "no_such_knob=1",
}


@pytest.mark.django_db
def test_revision_set_values_are_refused(world) -> None:
    for value in SET_VALUES.values():
        refused(*VLLM, "--set", value)


@pytest.mark.django_db
def test_a_revision_whose_engine_cannot_load_its_model_is_refused(world) -> None:
    said = refused(*REVISION, "--engine", "ollama", "--model", MODEL)
    assert said.startswith("engine: Ollama cannot load a GGUF file: the panel launches it with an Ollama tag"), said
    loading = "llama.cpp, SGLang or vLLM before 0.24.0 or with vllm-gguf-plugin"
    assert f"Choose an engine that loads {MODEL} ({loading}), or another model." in said
    said = refused(*REVISION, "--from", "1", "--model", "Qwen3.5-27B")  # r1 is llama.cpp
    assert said.startswith("model_variant: llama.cpp cannot load a Hugging Face checkpoint"), said


@pytest.mark.django_db
def test_a_good_revision_is_still_recorded(world) -> None:
    out = io.StringIO()
    call_command(*VLLM, "--set", "max_num_seqs=8", stdout=out)
    assert out.getvalue().strip() == "2"


@pytest.mark.django_db
@pytest.mark.parametrize("number", ["5", HUGE])
def test_revision_show_and_diff_of_missing_numbers(world, number) -> None:
    if number == HUGE:
        refused("revision", "show", "--host", "h1", number, argparse=True)
        refused("revision", "diff", "--host", "h1", "1", number, argparse=True)
    else:
        refused("revision", "show", "--host", "h1", number)
        refused("revision", "diff", "--host", "h1", "1", number)


# --- host declare ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_host_declare_bounds_gpu_counts(catalog) -> None:
    for count in ["99999999999", "257", "²", "-1", "9" * 5000, "1e3", ""]:
        refused("host", "declare", "big", "--gpu", f"RTX 3090:{count}")
        assert not Host.objects.filter(name="big").exists()


@pytest.mark.django_db
def test_host_declare_bounds_the_total(catalog) -> None:
    refused("host", "declare", "big", "--gpu", "RTX 3090:200", "--gpu", "RTX 3090:100")


@pytest.mark.django_db
@pytest.mark.parametrize("folder", ["models", "/srv/../etc", "/srv/models\x00"])
def test_host_declare_refuses_model_folders_that_are_not_plain_absolute_paths(catalog, folder) -> None:
    refused("host", "declare", "big", "--gpu", "RTX 3090:2", "--model-dir", folder)
    assert not Host.objects.filter(name="big").exists()


@pytest.mark.django_db
def test_host_declare_records_its_model_folders(catalog) -> None:
    call_command(
        "host",
        "declare",
        "lab",
        "--gpu",
        "RTX 3090:2",
        "--model-dir",
        "/srv/models/",
        "--model-dir",
        "/data",
        stdout=io.StringIO(),
    )
    assert Host.objects.get(name="lab").model_dirs == ["/srv/models", "/data"]


# --- from a real shell: exit status 2, one line, no traceback ------------------------------------------


def _manage(*args: str, db_name: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    url = env.get("DATABASE_URL", "")
    if url:
        env["DATABASE_URL"] = url.rsplit("/", 1)[0] + "/" + db_name
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.django_db(transaction=True)
def test_from_the_shell_exit_2_without_traceback(catalog, viewer, operator) -> None:
    from django.db import connection

    host = HostFactory(name="h1", model_dirs=["/models"])
    GPUFactory(host=host, index=0)
    make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=ModelVariant.objects.get(name=MODEL),
        knobs={"ctx_size": 4096},
        message="first",
        actor=operator,
    )
    before = stored()
    name = connection.settings_dict["NAME"]
    cases = [
        ("revision", "create", "--host", "h1", "--from", "1", "--message", "m", "--user", "vera"),
        ("plan", "--model", MODEL, "--engine", "vllm", "--gpu-type", "RTX 3090", "--gpu-count", HUGE),
        ("revision", "create", "--host", "h1", "--from", "1", "--message", "m", "--set", "ctx_size=" + "9" * 5000),
    ]
    for args in cases:
        result = _manage(*args, db_name=name)
        assert result.returncode == 2, (args[:2], result.stderr[-2000:])
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
        if args[0] == "revision":  # argparse's refusals print their usage line first
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert stored() == before
