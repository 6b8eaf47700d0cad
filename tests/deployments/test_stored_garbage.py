"""Pages that read stored model facts survive anything already stored (issue 11).

Old rows, admin edits or an importer bug may have left anything in `ModelVariant.arch`,
`gguf_kv`, `sampling_presets`, `min_engine_versions` or `weights_bytes`. The garbage below is
written straight into the database (as old data would be, bypassing every check), then every page
that shows the model is fetched: each one is a 200, and the bad facts read as unknown.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse

from deployments.models import DeploymentRevision, ModelVariant
from deployments.services.revisions import revision_mark_active
from serving.arch import ModelArch
from serving.planner.inputs import GgufKvFacts
from tests.hardware.factories import GPUFactory, HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

QWEN = "Qwen3.8-27B-W4A16-AWQ"
KNOBS = {"tensor_parallel_size": 2, "max_model_len": 32768}
GEMMA_KV: dict[str, Any] = {
    "architecture": "gemma3",
    "n_layer": 18,
    "head_count_kv": [1] * 18,
    "key_length": 256,
    "value_length": 256,
    "swa_layers": [i % 6 != 5 for i in range(18)],
    "sliding_window": 512,
    "context_length": 32768,
    "file_type": 15,
    "file_size": 253_000_000,
}
GEMMA_ARCH = {"architecture": "gemma3", "num_layers": 18, "num_attention_heads": 4, "num_kv_heads": 1, "head_dim": 256}

# (id, what is written over the victims' rows)
GARBAGE: list[tuple[str, dict[str, Any]]] = [
    ("strings-in-number-slots", {"arch": {"num_layers": "64", "num_attention_heads": "24", "num_kv_heads": "4",
                                          "head_dim": "256", "native_context": "262144", "layer_types": "full"}}),
    ("wrong-containers", {"arch": {"num_layers": [64], "hidden_size": {"v": 1}, "layer_types": {"a": 1},
                                   "has_vision": "yes", "architecture": ["x"]}}),
    ("arch-is-a-list", {"arch": ["num_layers", 64]}),
    ("arch-is-a-string", {"arch": "garbage"}),
    ("arch-is-a-number", {"arch": 42}),
    ("absurd-sizes", {"arch": {"num_layers": 10**15, "native_context": 1e308, "num_experts": -1, "head_dim": 0,
                               "num_kv_heads": 2**62, "layer_types": ["full_attention"] * 50_000}}),
    ("contradictions", {"arch": {"num_layers": 64, "num_attention_heads": 24, "num_kv_heads": 4, "head_dim": 256,
                                 "full_attention_layers": 1000, "linear_attention_layers": 1000,
                                 "num_experts": 2, "experts_per_token": 99, "layer_types": ["full_attention"] * 3}}),
    ("unknown-keys-and-control-text", {"arch": {"evil": {"x": [1, 2]}, "family": "a\u0007b", "torch_dtype": "x" * 500,
                                                "num_layers": 18}}),
    ("gguf-wrong-types", {"gguf_kv": {"architecture": 5, "n_layer": "x", "head_count_kv": "nope"}}),
    ("gguf-lengths-disagree", {"gguf_kv": {**GEMMA_KV, "head_count_kv": [1] * 5000, "swa_layers": [True] * 3}}),
    ("gguf-bad-optional-facts", {"gguf_kv": {**GEMMA_KV, "sliding_window": "512", "file_size": -1,
                                             "recurrent_layers": "all", "ssm_conv_kernel": 10**9}}),
    ("gguf-is-a-list", {"gguf_kv": [1, 2, 3]}),
    ("weights-negative", {"weights_bytes": -5}),
    ("weights-absurd", {"weights_bytes": 2**62}),
    ("min-versions-not-text", {"min_engine_versions": {"vllm": 17, "llama.cpp": ["b1"], "sglang": {"x": 1}}}),
    ("sampling-presets-garbage", {"sampling_presets": {"thinking": "hot", "non_thinking": [1e308]}}),
    ("sampling-presets-a-string", {"sampling_presets": "hot"}),
]  # fmt: skip

# Shapes of min_engine_versions that today's readers outside this part's files cannot take
# (deployments/planning.py calls dict() on it; diffing/model_table.py calls .get() on it).
NOT_A_MAPPING = [
    ("min-versions-a-list", {"min_engine_versions": ["vllm", "0.17"]}),
    ("min-versions-a-string", {"min_engine_versions": "0.17"}),
]


@pytest.fixture
def lab(catalog, operator):
    """Host "lab" (2 GPUs): r1 Qwen (active), r2 a copy of it, r3 a llama.cpp GGUF model; the
    copies ("victim-hf", "victim-gguf") are the rows the garbage is written into."""
    qwen = ModelVariant.objects.get(name=QWEN)
    victim_hf = ModelVariant.objects.create(
        name="victim-hf", repo_id="me/victim", format="hf", arch=dict(qwen.arch), weights_bytes=qwen.weights_bytes
    )
    victim_gguf = ModelVariant.objects.create(
        name="victim-gguf", gguf_file="victim.gguf", format="gguf", quantization="Q4_K_M", arch=GEMMA_ARCH,
        gguf_kv=GEMMA_KV, weights_bytes=253_000_000,
    )  # fmt: skip
    host = HostFactory(name="lab")
    for i in range(2):
        GPUFactory(host=host, index=i)
    common = {"host": host, "engine": "vllm", "engine_version": "0.17.0", "port": 8001, "actor": operator}
    r1 = make_revision(model_variant=qwen, knobs=KNOBS, message="qwen", **common)
    revision_mark_active(revision=r1, actor=operator)
    r2 = make_revision(model_variant=victim_hf, knobs=KNOBS, message="the victim", **common)
    r3 = DeploymentRevision.objects.create(  # as an old row: no service in between
        host=host, number=3, parent=r2, engine="llama.cpp", model_variant=victim_gguf,
        knobs={"ctx_size": 8192, "parallel": 1}, port=8002, author=operator, message="gguf victim",
    )  # fmt: skip
    return {"host": host, "victims": [victim_hf, victim_gguf], "revisions": [r1, r2, r3]}


def _pages(lab: dict[str, Any]) -> list[str]:
    victim = lab["victims"][0]
    urls = [
        reverse("dashboard:index"),
        reverse("dashboard:cards"),
        reverse("hardware:host_detail", args=["lab"]),  # the what-fits table over the whole catalog
        reverse("deployments:model_list"),
        reverse("deployments:revision_list", args=["lab"]),
        reverse("deployments:revision_new", args=["lab"]),
        reverse("deployments:revision_new", args=["lab"]) + "?from=2",
        reverse("deployments:revision_new", args=["lab"]) + "?from=3",
        reverse("deployments:revision_preview", args=["lab"])
        + f"?model_variant={victim.pk}&engine=vllm&knobs=tensor_parallel_size%3D2&port=8001",
        reverse("deployments:revision_preview", args=["lab"])
        + f"?model_variant={lab['victims'][1].pk}&engine=llama.cpp&knobs=ctx_size%3D4096&port=8002",
        reverse("deployments:revision_diff", args=["lab", 1, 2]),
        reverse("deployments:revision_diff", args=["lab", 2, 3]),
        reverse("deployments:revision_diff", args=["lab", 1, 3]),
    ]
    for number in (1, 2, 3):
        urls += [
            reverse("deployments:revision_detail", args=["lab", number]),
            reverse("deployments:revision_switch", args=["lab", number]),
            reverse("deployments:revision_exports", args=["lab", number]),
        ]
    return urls


def _store(lab: dict[str, Any], garbage: dict[str, Any]) -> None:
    for victim in lab["victims"]:
        ModelVariant.objects.filter(pk=victim.pk).update(**garbage)


def _fetch_all(client, lab) -> dict[str, int]:
    return {url: client.get(url).status_code for url in _pages(lab)}


@pytest.mark.parametrize(
    "garbage", [g for _, g in GARBAGE + NOT_A_MAPPING], ids=[name for name, _ in GARBAGE + NOT_A_MAPPING]
)
def test_every_page_showing_the_model_survives_stored_garbage(client, lab, operator, garbage):
    client.force_login(operator)
    _store(lab, garbage)
    statuses = _fetch_all(client, lab)
    assert statuses == dict.fromkeys(statuses, 200)


def _row(page: str, name: str) -> str:
    match = re.search(rf"<tr>\s*<td[^>]*>{re.escape(name)}.*?</tr>", page, re.S)
    assert match, name
    return match.group(0)


def test_bad_facts_read_as_unknown_on_the_model_list(client, lab, viewer):
    client.force_login(viewer)
    _store(lab, dict(GARBAGE)["strings-in-number-slots"])
    row = _row(client.get(reverse("deployments:model_list")).content.decode(), "victim-hf")
    assert "unknown" in row
    assert "262144" not in row and "64 (" not in row  # nothing shown from the strings


def test_bad_facts_read_as_unknown_in_the_generation_diff(client, lab, viewer):
    client.force_login(viewer)
    _store(lab, {"arch": {"native_context": "262144", "num_layers": -1}})
    page = client.get(reverse("deployments:revision_diff", args=["lab", 1, 2])).content.decode()
    native = re.search(r"Native context.*?</tr>", page, re.S)
    assert native and "unknown" in native.group(0)


def test_the_host_page_lists_the_victim_in_what_fits_with_unknown_facts(client, lab, viewer):
    client.force_login(viewer)
    _store(lab, dict(GARBAGE)["strings-in-number-slots"])
    page = client.get(reverse("hardware:host_detail", args=["lab"])).content.decode()
    assert "victim-hf" in page
    assert "lacks architecture facts" in page


def test_the_readers_drop_what_is_implausible_and_keep_what_is_not():
    arch = ModelArch.from_dict({"num_layers": 64, "head_dim": "256", "num_kv_heads": 2**62, "evil": 1})
    assert (arch.num_layers, arch.head_dim, arch.num_kv_heads) == (64, None, None)
    assert ModelArch.from_dict({"num_layers": 64.0}).num_layers == 64  # JSON may store a float
    contradicting = ModelArch.from_dict({"num_layers": 4, "layer_types": ["full_attention"] * 5})
    assert contradicting.layer_types == () and contradicting.num_layers == 4
    assert GgufKvFacts.from_dict({**GEMMA_KV, "head_count_kv": [1] * 5}) is None  # required and wrong: unknown
    kept = GgufKvFacts.from_dict({**GEMMA_KV, "sliding_window": "512"})
    assert kept is not None and kept.sliding_window is None and kept.n_layer == 18
