"""Hostile values in every numeric request parameter, form field and JSON-ish field a user can
send: each one is a 400 or a form error beside its field, never a 500, and nothing is stored.

Against the real PostgreSQL: a NUL in a jsonb value or a query is a PostgreSQL error that SQLite
would not show."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse

from controlpanel.params import BadParameter, FiniteFloatField, StrictIntegerField, int_param, parse_int
from core.models import AuditEvent
from deployments.models import (
    BenchmarkRun,
    DeploymentRevision,
    ModelVariant,
    Operation,
    RevisionComment,
)
from deployments.services.catalog import catalog_load
from tests.hardware.factories import GPUFactory, HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

# Each of these is a client error wherever a whole number is expected.
HOSTILE = {
    "superscript-two": "²",  # str.isdigit() says True, int() refuses it
    "arabic-indic-three": "٣",  # int() reads 3: not what was typed on an ASCII form
    "5000-digits": "9" * 5000,  # int() refuses more than 4,300 digits
    "20-digits": "99999999999999999999",  # past bigint
    "negative": "-1",
    "exponent": "1e9",
    "inf": "inf",
    "nan": "nan",
    "Infinity": "Infinity",
    "nul": "1\x00",
    "space-inside": "1 2",
}
EMPTY = ""


@pytest.fixture(scope="module")
def _world(django_db_setup: Any, django_db_blocker: Any) -> Any:
    """One catalog, host, revision and benchmark run for the whole module, inside a transaction
    rolled back at the end (each test's own changes roll back to a savepoint)."""
    from tests.conftest import _user

    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            catalog_load()
            viewer, operator = _user("vera", "viewer"), _user("otto", "operator")
            host = HostFactory(name="h1", model_dirs=["/models"])
            GPUFactory(host=host, index=0)
            make_revision(
                host=host,
                engine="llama.cpp",
                model_variant=ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL"),
                knobs={"ctx_size": 4096},
                message="first",
                actor=operator,
            )
            BenchmarkRun.objects.create(
                id=1, revision=host.revisions.get(number=1), profile_name="q", profile={"name": "q"}, engine="llama.cpp"
            )
            yield {"host": host, "viewer": viewer, "operator": operator}
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


@pytest.fixture
def world(_world: Any, db: Any) -> Any:
    return _world["host"]


@pytest.fixture
def as_viewer(client: Client, _world: Any, db: Any) -> Client:
    client.force_login(_world["viewer"])
    return client


@pytest.fixture
def as_operator(client: Client, _world: Any, db: Any) -> Client:
    client.force_login(_world["operator"])
    return client


def each_value(check: Any, values: dict[str, str] | None = None) -> None:
    """Run `check(value)` for every hostile value; report every one that failed."""
    failed = []
    for label, value in (values or HOSTILE).items():
        try:
            check(value)
        except AssertionError as exc:
            failed.append(f"{label}: {exc}")
    assert not failed, failed


def counts() -> tuple[int, ...]:
    return (
        DeploymentRevision.objects.count(),
        Operation.objects.count(),
        ModelVariant.objects.count(),
        AuditEvent.objects.count(),
        RevisionComment.objects.count(),
    )


# --- the helper itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_parse_int_refuses_every_hostile_value(value: str) -> None:
    with pytest.raises(ValueError):
        parse_int(value, name="n", minimum=0, maximum=10**6)


def test_parse_int_takes_plain_digits() -> None:
    assert parse_int(" 42 ", name="n") == 42
    assert parse_int("-3", name="n", minimum=-5) == -3
    assert parse_int(str(2**63 - 1), name="n") == 2**63 - 1


def test_int_param_defaults_and_400s() -> None:
    assert int_param({}, "n", default=7) == 7
    assert int_param({"n": ""}, "n", default=7) == 7
    assert int_param({"n": "12"}, "n") == 12
    with pytest.raises(BadParameter):
        int_param({"n": "²"}, "n")


@pytest.mark.parametrize(
    "value", ["²", "٣", "9" * 5000, "1.0", "1e3", "inf", "nan", "1_000", True], ids=lambda v: repr(v)[:12]
)
def test_strict_integer_field_refuses(value: Any) -> None:
    field = StrictIntegerField(required=False)
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        field.clean(value)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "NaN", "Infinity", "1e999", "9" * 5000, "2e6"])
def test_finite_float_field_refuses(value: str) -> None:
    from django.core.exceptions import ValidationError

    field = FiniteFloatField(required=False, max_value=1e6)
    with pytest.raises(ValidationError):
        field.clean(value)


# --- numeric query parameters: 400, never 500 ---------------------------------------------------

# (url name, kwargs, query parameter, other query parameters)
QUERY_INTS = [
    ("deployments:revision_new", {"host": "h1"}, "from", {}),
    ("deployments:benchmark_new", {"host": "h1"}, "revision", {}),
    ("deployments:benchmark_list", {"host": "h1"}, "a", {"b": "1"}),
    ("deployments:benchmark_list", {"host": "h1"}, "b", {"a": "1"}),
    ("deployments:audit_log", {}, "page", {}),
    # (engine_log?run=N of a start that does not exist is a 404: tests/deployments/test_engine_logs.py)
    ("deployments:engine_log", {"name": "h1"}, "problems", {}),
    ("deployments:engine_log_follow", {"name": "h1"}, "run", {"after": "0"}),
    ("deployments:engine_log_follow", {"name": "h1"}, "after", {}),
    ("deployments:engine_log_follow", {"name": "h1"}, "problems", {"after": "0"}),
]


@pytest.mark.parametrize("name,kwargs,param,extra", QUERY_INTS, ids=[f"{q[0]}?{q[2]}" for q in QUERY_INTS])
def test_numeric_query_parameter_is_a_400(as_viewer, world, name, kwargs, param, extra) -> None:
    def check(value: str) -> None:
        response = as_viewer.get(reverse(name, kwargs=kwargs), {**extra, param: value})
        assert response.status_code == 400, response.status_code
        page = response.content.decode()
        said = "Bad request" in page or "errorlist" in page  # the 400 page, or the form with its error
        assert said and param in page, "the page says which parameter was wrong"

    each_value(check)


@pytest.mark.parametrize("name,kwargs,param,extra", QUERY_INTS, ids=[f"{q[0]}?{q[2]}" for q in QUERY_INTS])
def test_numeric_query_parameter_empty_or_good(as_viewer, world, name, kwargs, param, extra) -> None:
    assert as_viewer.get(reverse(name, kwargs=kwargs), {**extra, param: EMPTY}).status_code in (200, 400)
    response = as_viewer.get(reverse(name, kwargs=kwargs), {**extra, param: "1"})
    assert response.status_code in (200, 302, 400)  # benchmark_list: a == b is its own 400


def test_good_query_numbers_still_work(as_viewer, world) -> None:
    page = as_viewer.get(reverse("deployments:revision_new", kwargs={"host": "h1"}), {"from": "1"})
    assert page.status_code == 200 and page.context["start"].number == 1
    page = as_viewer.get(reverse("deployments:benchmark_new", kwargs={"host": "h1"}), {"revision": "1"})
    assert page.status_code == 200 and page.context["revision"].number == 1


# --- the diff picker (a GET form) ----------------------------------------------------------------


@pytest.mark.parametrize("field", ["a", "b"])
def test_diff_picker_numbers_are_form_errors(as_viewer, world, field) -> None:
    other = "b" if field == "a" else "a"

    def check(value: str) -> None:
        url = reverse("deployments:revision_diff_pick", kwargs={"host": "h1"})
        response = as_viewer.get(url, {field: value, other: "1"})
        assert response.status_code == 200
        assert field in response.context["form"].errors

    each_value(check)


# --- text query parameters: NUL and absurd length are 400s, not PostgreSQL errors ----------------

QUERY_TEXT = [
    ("deployments:revision_list", {"host": "h1"}, "model"),
    ("deployments:revision_list", {"host": "h1"}, "engine"),
    ("deployments:revision_list", {"host": "h1"}, "author"),
    ("deployments:revision_list", {"host": "h1"}, "tag"),
    ("deployments:benchmark_list", {"host": "h1"}, "a"),
]


@pytest.mark.parametrize("value", ["x\x00y", "x" * 5000], ids=["nul", "5000-chars"])
@pytest.mark.parametrize("name,kwargs,param", QUERY_TEXT, ids=[f"{q[0]}?{q[2]}" for q in QUERY_TEXT])
def test_text_query_parameter_is_a_400(as_viewer, world, name, kwargs, param, value) -> None:
    assert as_viewer.get(reverse(name, kwargs=kwargs), {param: value}).status_code == 400


@pytest.mark.parametrize("param", ["action", "actor", "host", "since", "until"])
def test_audit_filters_with_nul_are_form_errors(as_viewer, world, param) -> None:
    response = as_viewer.get(reverse("deployments:audit_log"), {param: "x\x00y"})
    assert response.status_code == 200
    assert param in response.context["form"].errors


def test_unread_query_parameters_are_ignored(as_viewer, world) -> None:
    # The host page reads no query parameters: hostile ones change nothing.
    response = as_viewer.get(reverse("hardware:host_detail", kwargs={"name": "h1"}), {"since": "²", "hours": "nan"})
    assert response.status_code == 200


# --- numbers in paths: the converters take ASCII digits; too large is a 404 -----------------------

PATHS = [
    "/benchmarks/{n}/",
    "/benchmarks/{n}/export.json",
    "/benchmarks/compare/{n}/1/",
    "/benchmarks/compare/1/{n}/",
    "/hosts/h1/revisions/{n}/",
    "/hosts/h1/revisions/{n}/switch/",
    "/hosts/h1/revisions/{n}/exports/",
    "/hosts/h1/diff/{n}/1/",
    "/hosts/h1/diff/1/{n}/",
]


@pytest.mark.parametrize("number", ["9" * 5000, "99999999999999999999", str(2**63), "0"])
@pytest.mark.parametrize("template", PATHS)
def test_huge_numbers_in_paths_are_404(as_viewer, world, template, number) -> None:
    assert as_viewer.get(template.format(n=number)).status_code == 404


@pytest.mark.parametrize("number", ["²", "٣", "-1", "1e9"])
def test_non_ascii_numbers_in_paths_do_not_match(as_viewer, world, number) -> None:
    assert as_viewer.get(f"/benchmarks/{number}/").status_code == 404


# --- posted forms: numeric fields --------------------------------------------------------------------


def revision_post(**overrides: str) -> dict[str, str]:
    data = {
        "model_variant": str(ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL").pk),
        "engine": "llama.cpp",
        "engine_version": "",
        "knobs": "ctx_size=4096",
        "env": "",
        "served_name": "",
        "port": "8000",
        "tag": "",
        "message": "hostile",
        "parent": "1",
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize("field", ["port", "parent", "model_variant"])
def test_revision_form_numbers(as_operator, world, field) -> None:
    before = counts()

    def check(value: str) -> None:
        url = reverse("deployments:revision_new", kwargs={"host": "h1"})
        response = as_operator.post(url, revision_post(**{field: value}))
        assert response.status_code == 200
        assert field in response.context["form"].errors

    each_value(check)
    assert counts() == before


def test_revision_form_still_records_a_good_revision(as_operator, world) -> None:
    response = as_operator.post(reverse("deployments:revision_new", kwargs={"host": "h1"}), revision_post())
    assert response.status_code == 302
    assert world.revisions.count() == 2


@pytest.mark.parametrize("field", ["port", "parent"])
def test_live_planner_preview_numbers(as_viewer, world, field) -> None:
    url = reverse("deployments:revision_preview", kwargs={"host": "h1"})

    def check(value: str) -> None:
        for response in (
            as_viewer.get(url, revision_post(**{field: value})),
            as_viewer.post(url, revision_post(**{field: value})),
        ):
            assert response.status_code == 200
            if field == "parent":  # the planner does not read the parent: the preview ignores it
                assert not any("arent" in e for e in response.context["errors"])
            else:
                assert response.context["errors"]

    each_value(check)


BENCH_FIELDS = ["input_tokens", "output_tokens", "requests", "ttft_slo_ms", "tpot_slo_ms", "e2e_slo_ms", "revision"]


@pytest.mark.parametrize("field", [*BENCH_FIELDS, "concurrency"])
def test_benchmark_form_numbers(as_operator, world, field) -> None:
    before = counts()

    def check(value: str) -> None:
        response = as_operator.post(
            reverse("deployments:benchmark_new", kwargs={"host": "h1"}),
            {"profile": "custom", "concurrency": "1", field: value},
        )
        assert response.status_code == 400
        assert field in response.context["form"].errors

    each_value(check)
    assert counts() == before


@pytest.mark.parametrize(
    "field,value", [("ttft_slo_ms", "1e300"), ("input_tokens", "2000001"), ("concurrency", "1,2,99999999999")]
)
def test_benchmark_form_magnitudes(as_operator, world, field, value) -> None:
    response = as_operator.post(
        reverse("deployments:benchmark_new", kwargs={"host": "h1"}),
        {"profile": "custom", "concurrency": "1", field: value},
    )
    assert response.status_code == 400 and field in response.context["form"].errors


def test_model_import_weights_gib(as_operator, world) -> None:
    before = counts()

    def check(value: str) -> None:
        data = {
            "source": "hf",
            "hf-name": "hostile-model",
            "hf-config_text": '{"model_type": "llama"}',
            "hf-weights_gib": value,
        }
        response = as_operator.post(reverse("deployments:model_import"), data)
        assert response.status_code == 200
        assert "weights_gib" in response.context["hf_form"].errors

    each_value(check, {**HOSTILE, "1e300": "1e300"})
    assert counts() == before


# --- posted forms: NUL, NaN, depth and size in JSON-ish and text fields -------------------------------

KNOB_JSON = {
    "nul-escape": 'limit_mm_per_prompt={"image": "a\\u0000b"}',
    "nul-key": 'limit_mm_per_prompt={"a\\u0000": 1}',
    "nan": 'limit_mm_per_prompt={"image": NaN}',
    "infinity": 'limit_mm_per_prompt={"image": Infinity}',
    "huge-int": 'limit_mm_per_prompt={"image": ' + "9" * 30 + "}",
    "5000-digit-int": 'limit_mm_per_prompt={"image": ' + "9" * 5000 + "}",
    "deep": "limit_mm_per_prompt=" + '{"a":' * 40 + "1" + "}" * 40,
    "wide": "limit_mm_per_prompt={" + ",".join(f'"k{i}": {i}' for i in range(3000)) + "}",
    "5000-digit-knob": "max_num_seqs=" + "9" * 5000,
    "inf-knob": "gpu_memory_utilization=inf",
    "nan-knob": "gpu_memory_utilization=nan",
}


@pytest.mark.parametrize("knobs", KNOB_JSON.values(), ids=KNOB_JSON.keys())
def test_json_knobs_are_form_errors(as_operator, world, knobs) -> None:
    before = counts()
    url = reverse("deployments:revision_new", kwargs={"host": "h1"})
    data = revision_post(engine="vllm", knobs=knobs, parent="")
    data["model_variant"] = str(ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL").pk)
    response = as_operator.post(url, data)
    assert response.status_code == 200
    assert "knobs" in response.context["form"].errors, knobs[:60]
    assert counts() == before
    preview = as_operator.post(reverse("deployments:revision_preview", kwargs={"host": "h1"}), data)
    assert preview.status_code == 200 and preview.context["errors"]


TEXT_FIELDS = [
    ("deployments:revision_new", {"host": "h1"}, lambda v: revision_post(message=v), "message"),
    ("deployments:revision_new", {"host": "h1"}, lambda v: revision_post(tag=v), "tag"),
    ("deployments:revision_new", {"host": "h1"}, lambda v: revision_post(served_name=v), "served_name"),
    ("deployments:revision_new", {"host": "h1"}, lambda v: revision_post(engine_version=v), "engine_version"),
    ("deployments:revision_new", {"host": "h1"}, lambda v: revision_post(env="A=" + v), "env"),
    ("deployments:revision_new", {"host": "h1"}, lambda v: revision_post(knobs="ctx_size=4096\nalias=" + v), "knobs"),
    ("deployments:revision_switch", {"host": "h1", "number": 1}, lambda v: {"override_reason": v}, "override_reason"),
    ("deployments:benchmark_new", {"host": "h1"}, lambda v: {"profile": "custom", "concurrency": v}, "concurrency"),
    ("deployments:ansible_import", {"host": "h1"}, lambda v: {"text": "vllm_model: x", "message": v}, "message"),
    ("deployments:model_import", {}, lambda v: {"source": "gguf", "gguf-path": v}, "path"),
    ("deployments:model_import", {}, lambda v: {"source": "hf", "hf-name": v, "hf-config_text": "{}"}, "name"),
]


@pytest.mark.parametrize("name,kwargs,make,field", TEXT_FIELDS, ids=[f"{t[0]}:{t[3]}" for t in TEXT_FIELDS])
def test_nul_in_text_fields_is_a_form_error(as_operator, world, name, kwargs, make, field) -> None:
    before = counts()
    response = as_operator.post(reverse(name, kwargs=kwargs), make("a\x00b"))
    assert response.status_code < 500
    assert response.status_code != 302
    form = response.context.get("form")
    if name == "deployments:model_import":  # three forms on the page: the one posted
        form = response.context["gguf_form"] if field == "path" else response.context["hf_form"]
    assert field in form.errors, (name, field)
    assert counts() == before


@pytest.mark.parametrize(
    "name,kwargs,data,field,form",
    [
        ("deployments:revision_comment", {"host": "h1", "number": 1}, {}, "body", "comment_form"),
        ("deployments:revision_new", {"host": "h1"}, revision_post, "message", "form"),
        ("deployments:ansible_import", {"host": "h1"}, {"text": "vllm_model: x"}, "message", "form"),
    ],
)
def test_free_text_is_bounded(as_operator, world, name, kwargs, data, field, form) -> None:
    before = counts()
    base = data() if callable(data) else data
    response = as_operator.post(reverse(name, kwargs=kwargs), {**base, field: "x" * 200_000})
    assert response.status_code == 200
    assert field in response.context[form].errors
    assert counts() == before


def test_nul_in_a_comment_is_a_form_error(as_viewer, world) -> None:
    before = counts()
    response = as_viewer.post(
        reverse("deployments:revision_comment", kwargs={"host": "h1", "number": 1}), {"body": "a\x00b"}
    )
    assert response.status_code == 200
    assert "body" in response.context["comment_form"].errors
    assert counts() == before


@pytest.mark.parametrize(
    "name,kwargs,field,data",
    [
        ("deployments:ansible_import", {"host": "h1"}, "file", {"message": "m"}),
        ("deployments:model_import", {}, "config", {"source": "hf", "hf-name": "up"}),
    ],
)
def test_nul_in_uploaded_files_is_a_form_error(as_operator, world, name, kwargs, field, data) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    before = counts()
    key = "hf-config" if field == "config" else field
    upload = SimpleUploadedFile("f.txt", b'{"model_type": "llama", "x": "a\x00b"}\n')
    response = as_operator.post(reverse(name, kwargs=kwargs), {**data, key: upload})
    assert response.status_code == 200
    form = response.context.get("hf_form") if field == "config" else response.context["form"]
    assert field in form.errors
    assert counts() == before


@pytest.mark.parametrize(
    "text",
    ['{"model_type": "llama", "name": "a\\u0000b"}', '{"model_type": "llama", "num_hidden_layers": NaN}'],
    ids=["nul-escape", "nan"],
)
def test_json_escapes_in_a_pasted_config_never_500(as_operator, world, text) -> None:
    before = counts()
    data = {"source": "hf", "hf-name": "pasted", "hf-config_text": text}
    response = as_operator.post(reverse("deployments:model_import"), data)
    assert response.status_code < 500
    if response.status_code != 302:
        assert response.context["hf_form"].errors
        assert counts() == before
