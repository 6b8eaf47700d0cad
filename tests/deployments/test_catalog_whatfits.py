"""The starter catalog carries what the planner needs: "What fits" answers for every model in it."""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from deployments.catalog_data import MODEL_VARIANTS
from deployments.models import ModelVariant
from deployments.selectors.hosts import catalog_models
from serving.planner import catalog_host, what_fits

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_HOSTS = {"6 x RTX 3090 (seed 000's lab)": ("rtx3090", 6), "1 x H200": ("h200", 1)}


def _catalog() -> list:
    return catalog_models(ModelVariant.objects.filter(name__in=[m["name"] for m in MODEL_VARIANTS]).order_by("name"))


@pytest.mark.parametrize("host", sorted(REFERENCE_HOSTS))
def test_every_catalog_model_gets_a_definite_answer(catalog, host):
    models = _catalog()
    assert {m.name for m in models} == {m["name"] for m in MODEL_VARIANTS}
    cells = what_fits(catalog_host(*REFERENCE_HOSTS[host]), models)
    for model in models:
        mine = [c for c in cells if c.model == model.name]
        assert mine, f"{model.name}: no layout planned on {host}"
        for cell in mine:
            # the page's "? unknown": a verdict without a KV pool to back it
            assert cell.kv_pool_tokens is not None, (
                f"{model.name} {cell.layout} {cell.context}: unknown ({cell.reason})"
            )
            assert cell.verdict in {"fits", "tight", "no"}
            if cell.verdict != "fits":
                assert cell.reason  # the figures that say why


def test_the_seed_labs_122b_question_is_answered(catalog):
    """Seed 000: Qwen3.5-122B Q6_K_XL across six 3090s at its full native context, with llama.cpp."""
    model = next(m for m in _catalog() if m.name == "Qwen3.5-122B-A10B-Q6_K_XL")
    cells = what_fits(catalog_host("rtx3090", 6), [model], contexts=(262144,), max_num_seqs=1)
    by_gpus = {c.gpus_used: c for c in cells}
    assert by_gpus[6].verdict in {"fits", "tight"} and by_gpus[6].kv_pool_tokens >= 262144
    assert by_gpus[4].verdict == "no" and "GiB" in by_gpus[4].reason  # ~105 GB does not fit four 24 GB cards


def _documented_plan_command() -> list[str]:
    """The `plan` line of the operators' guide's command list, its arguments as a user types them."""
    guide = (ROOT / "docs" / "operators-guide.md").read_text()
    line = next(line for line in guide.splitlines() if line.startswith("python manage.py plan "))
    return [a for a in shlex.split(line.split("#", 1)[0])[3:] if a != "[--json]"]


def test_the_documented_plan_example_prints_figures_not_unknown(catalog):
    args = _documented_plan_command()
    assert args[:2] == ["--model", "Qwen3.5-27B"] and "tensor_parallel_size=6" in args
    out = io.StringIO()
    with pytest.raises(CommandError):  # TP=6 is the trap the example shows
        call_command("plan", *args, "--json", stdout=out, stderr=io.StringIO())
    report = json.loads(out.getvalue())
    assert report["kv_bytes_per_token"] and report["kv_pool_tokens"] and report["max_model_len"] == 262144
    assert "tp.kv_heads" in {f["code"] for f in report["findings"]}  # 4 KV heads: TP 1, 2 or 4 only
