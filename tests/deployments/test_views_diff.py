"""Diff pages: any two revisions side by side, and the picker."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from deployments.models import Deployment, ModelVariant
from deployments.services.revisions import revision_mark_active
from tests.deployments.test_views_revisions import GOOD_KNOBS, add_bench, add_revision, make_lab

pytestmark = pytest.mark.django_db


def test_knob_env_and_version_changes_are_highlighted(client, catalog, operator, viewer):
    host, r1 = make_lab(operator)
    knobs = {k: v for k, v in GOOD_KNOBS.items() if k != "reasoning_parser"}
    add_revision(host, operator, knobs={**knobs, "max_model_len": 65536, "max_num_seqs": 4}, engine_version="0.18.0",
                 env={"VLLM_USE_FLASHINFER_SAMPLER": "0"})  # fmt: skip
    client.force_login(viewer)
    response = client.get(reverse("deployments:revision_diff", args=["lab", 1, 2]))
    page = response.content.decode()
    assert response.status_code == 200
    assert (
        '<tr class="diff-changed"><th><span class="marker">~</span> max_model_len</th><td>32768</td><td>65536</td>'
        in page
    )
    assert '<tr class="diff-added"><th><span class="marker">+</span> max_num_seqs</th>' in page
    assert '<tr class="diff-removed"><th><span class="marker">-</span> reasoning_parser</th>' in page
    assert "VLLM_USE_FLASHINFER_SAMPLER" in page and "NCCL_P2P_DISABLE" in page
    assert "0.17.0" in page and "0.18.0" in page
    assert "Planner" in page  # planner deltas (KV pool, full-length sequences) when they moved
    assert "model-generation" not in page and "The model changed" not in page


def test_model_change_shows_the_generation_table_and_benchmark_deltas(client, catalog, operator, viewer):
    host, r1 = make_lab(operator)
    r2 = add_revision(
        host,
        operator,
        model_variant=ModelVariant.objects.get(name="Qwen3.6-35B-A3B-AWQ-4bit"),
        knobs={"tensor_parallel_size": 2, "max_model_len": 65536},
        message="back to the MoE",
    )
    add_bench(r1, ttft=200.0, tps=40.0, agg=100.0)
    add_bench(r2, ttft=120.0, tps=80.0, agg=220.0)
    client.force_login(viewer)
    page = client.get(reverse("deployments:revision_diff", args=["lab", 1, 2])).content.decode()
    assert "The model changed" in page
    assert "Qwen3.6-35B-A3B-AWQ-4bit" in page and "Qwen3.8-27B-W4A16-AWQ" in page
    assert "Aspect" in page  # the generation table's header
    assert "output tok/s" in page and "TTFT p50 ms" in page  # benchmark deltas


def test_no_changes(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)
    page = client.get(reverse("deployments:revision_diff", args=["lab", 1, 1])).content.decode()
    assert "same configuration" in page


def test_picker_redirects_and_reports_unknown_numbers(client, catalog, operator, viewer):
    host, _ = make_lab(operator)
    add_revision(host, operator)
    client.force_login(viewer)
    url = reverse("deployments:revision_diff_pick", args=["lab"])
    response = client.get(url, {"a": 1, "b": 2})
    assert response.status_code == 302 and response.url == reverse("deployments:revision_diff", args=["lab", 1, 2])
    bad = client.get(url, {"a": 1, "b": 9})
    assert bad.status_code == 200 and "lab has no revision r9" in bad.content.decode()
    junk = client.get(url, {"a": "x", "b": "-1"})
    assert junk.status_code == 200 and "errorlist" in junk.content.decode()
    assert client.get(url).status_code == 200


def _picked(page: str, field: str) -> list[str]:
    select = re.search(rf'<select name="{field}">(.*?)</select>', page, re.S)
    assert select, page
    return re.findall(r'<option value="(\d+)" selected>', select.group(1))


def test_picker_offers_the_active_revision_against_its_parent_never_one_against_itself(
    client, catalog, operator, viewer
):
    host, r1 = make_lab(operator)  # r1 is active
    r2 = add_revision(host, operator, parent=r1)
    add_revision(host, operator, parent=r1)  # r3, newer, not active
    client.force_login(viewer)
    url = reverse("deployments:revision_diff_pick", args=["lab"])
    # r1 active, with no parent and none before it: against the newest other one, older on the left.
    page = client.get(url).content.decode()
    assert (_picked(page, "a"), _picked(page, "b")) == (["1"], ["3"])
    revision_mark_active(revision=r2, actor=operator)
    page = client.get(url).content.decode()
    assert (_picked(page, "a"), _picked(page, "b")) == (["1"], ["2"])  # r2 against its parent r1, not r3 vs r3
    Deployment.objects.filter(host=host).update(active_revision=None)
    page = client.get(url).content.decode()
    assert (_picked(page, "a"), _picked(page, "b")) == (["1"], ["3"])  # nothing active: the newest, r3, vs r1


def test_unknown_revision_is_404(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)
    assert client.get(reverse("deployments:revision_diff", args=["lab", 1, 7])).status_code == 404
