from __future__ import annotations

import pytest

from deployments.models import DeploymentRevision, ModelVariant, active_revision_of
from deployments.services.demo import demo_load, demo_remove
from hardware.models import Host
from tests.hardware.factories import HostFactory

pytestmark = pytest.mark.django_db


def test_demo_records_both_seed_labs_with_their_histories_and_removes_only_them(catalog):
    real = HostFactory(name="my-real-box")
    demo_load()

    lab1 = Host.objects.get(name="demo-6x3090")
    assert lab1.is_demo and lab1.gpus.count() == 6 and not lab1.is_online
    history = list(lab1.revisions.order_by("number"))
    assert [(r.engine, r.model_variant.name) for r in history] == [
        ("vllm", "Qwen3.5-27B"),
        ("vllm", "Qwen3.5-35B-A3B"),
        ("llama.cpp", "Qwen3.5-122B-A10B-Q6_K_XL"),
    ]
    assert history[0].knobs["tensor_parallel_size"] == 4
    assert [r.parent for r in history] == [None, history[0], history[1]]
    assert active_revision_of(lab1) == history[-1]

    lab2 = Host.objects.get(name="demo-2x5060ti")
    tags = list(lab2.revisions.order_by("number").values_list("tag", flat=True))
    assert tags == ["vllm_Qwen3-32B-AWQ", "vllm_Qwen3.6-35B-A3B-AWQ-4bit", "vllm_Qwen3.8-27B-W4A16-AWQ"]
    latest = lab2.revisions.get(number=3)
    assert latest.knobs["max_model_len"] == 262144 and latest.knobs["max_num_seqs"] == 4
    assert latest.env["NCCL_P2P_DISABLE"] == "1"
    assert lab2.revisions.get(number=2).knobs["max_model_len"] == 65536

    demo_load()  # idempotent
    assert Host.objects.filter(is_demo=True).count() == 2

    assert demo_remove() == 2
    assert list(Host.objects.values_list("name", flat=True)) == [real.name]
    assert not DeploymentRevision.objects.exists()
    assert ModelVariant.objects.filter(name="Qwen3.8-27B-W4A16-AWQ").exists()  # the catalog stays
