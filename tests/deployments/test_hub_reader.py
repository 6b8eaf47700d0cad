"""Reading a repository's facts from a hub (deployments.importers.hub) with the real
huggingface_hub client against the local hub (tests/support/fake_hub.py), found through
HF_ENDPOINT as a mirror would be: the GGUF header by HTTP ranges only, the config, the
safetensors index's size and the generation config, and every refusal as a clear HubError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deployments.importers.hub import HubError, hub_read
from tests.support.fake_hub import FakeHub
from tests.support.llama import gemma_model_path

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
GGUF = "gemma-3-270m-it-Q4_K_M.gguf"


@pytest.fixture
def hub(monkeypatch):
    hub = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    hub.add_repo("unsloth/gemma-3-270m-it-GGUF", {GGUF: Path(gemma_model_path()), "README.md": b"# quants\n"})
    index = {
        "metadata": {"total_size": 19_345_000_000},
        "weight_map": {"lm_head.weight": "model-00001-of-00004.safetensors"},
    }
    generation = {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "eos_token_id": [151645], "do_sample": True}
    hub.add_repo(
        "Qwen/Qwen3-32B-AWQ",
        {
            "config.json": (CONFIGS / "qwen3-32b-awq.json").read_bytes(),
            "model.safetensors.index.json": json.dumps(index).encode(),
            "generation_config.json": json.dumps(generation).encode(),
            "tokenizer.json": b"{}",
            **{f"model-0000{i}-of-00004.safetensors": b"\0" * 1024 for i in range(1, 5)},
            "original/consolidated.pth": b"\0" * 2048,
        },
    )
    hub.add_repo("acme/gated", {"config.json": (CONFIGS / "gemma3-270m.json").read_bytes()}, gated="auto")
    hub.grant("hf_ok", "acme/gated")
    part = [f"gemma-3-270m-it-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    hub.add_repo(
        "acme/split-GGUF",
        {part[0]: Path(gemma_model_path()), part[1]: b"\0" * 4096, part[2]: b"\0" * 1024, "README.md": b"#\n"},
    )
    hub.add_repo("acme/split-missing-GGUF", {part[0]: Path(gemma_model_path()), part[2]: b"\0" * 1024})
    hub.add_repo(
        "acme/many-quants",
        {"m-Q4_K_M.gguf": b"GGUF" + b"\0" * 100, "m-Q8_0.gguf": b"GGUF" + b"\0" * 100, "mmproj-F16.gguf": b"GGUF"},
    )
    yield hub
    hub.stop()


def test_a_gguf_header_is_read_by_ranges_without_the_weights(hub):
    model = hub_read("unsloth/gemma-3-270m-it-GGUF")
    size = Path(gemma_model_path()).stat().st_size
    assert model.gguf_file == GGUF and model.revision == hub.repos["unsloth/gemma-3-270m-it-GGUF"].sha
    assert model.gguf is not None and model.gguf.arch.num_layers == 18 and model.gguf.file_type_name == "Q4_K_M"
    assert model.gguf.file_size == size
    bodies = [r for r in hub.requests if r["method"] == "GET" and r["path"].startswith("/cdn/")]
    assert bodies and all(r["range"] and r["range"].startswith("bytes=0-") for r in bodies)
    fetched = sum(int(r["range"].split("-")[1]) + 1 for r in bodies)
    assert fetched < size / 10  # a few MiB of a 253 MB file
    assert [f.name for f in model.needed_files()] == [GGUF]  # not the README


def test_a_split_gguf_is_read_from_its_first_part_and_needs_every_part(hub):
    """llama.cpp's split GGUF (NAME-00001-of-00003.gguf and its siblings): the repository's one GGUF
    is its first part, whichever part is named, and the download fetches them all."""
    parts = [f"gemma-3-270m-it-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for named in ("", parts[1]):
        model = hub_read("acme/split-GGUF", gguf_file=named)
        assert model.gguf_file == parts[0] and model.gguf_shards == tuple(parts)
        assert model.gguf is not None and model.gguf.file_size == Path(gemma_model_path()).stat().st_size + 5120
        assert [f.name for f in model.needed_files()] == parts
    with pytest.raises(HubError) as missing:
        hub_read("acme/split-missing-GGUF")
    assert str(missing.value) == f"acme/split-missing-GGUF lacks shard {parts[1]} of {parts[0]}."


def test_a_checkpoint_gives_config_index_size_and_sampling(hub):
    model = hub_read("Qwen/Qwen3-32B-AWQ")
    assert model.gguf is None and model.config_text and '"awq"' in model.config_text
    assert model.index_total_size == 19_345_000_000
    assert model.generation_config == {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
    needed = [f.name for f in model.needed_files()]
    assert "original/consolidated.pth" not in needed and "tokenizer.json" in needed
    assert sum(n.endswith(".safetensors") for n in needed) == 4
    lfs = [f for f in model.needed_files() if f.name.endswith(".safetensors")]
    assert all(f.sha256 and f.size == 1024 for f in lfs)


def test_hf_endpoint_is_read_at_each_call(hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(HubError) as away:
        hub_read("Qwen/Qwen3-32B-AWQ")
    assert "could not be reached" in str(away.value) and "127.0.0.1:9" in str(away.value)


def test_a_gated_repository_needs_a_token_with_access(hub):
    with pytest.raises(HubError) as refused:
        hub_read("acme/gated")
    assert refused.value.field == "token" and "gated" in str(refused.value)
    with pytest.raises(HubError) as foreign:
        hub_read("acme/gated", token="hf_wrong")
    assert foreign.value.field == "token" and "no access" in str(foreign.value)
    assert hub_read("acme/gated", token="hf_ok").config_text


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        ({"repo_id": "nobody/nothing"}, "repo_id", "No model repository"),
        ({"repo_id": "Qwen/Qwen3-32B-AWQ", "revision": "v9"}, "revision", "no revision"),
        ({"repo_id": "acme/many-quants"}, "file", "holds 2 GGUF files"),
        ({"repo_id": "acme/many-quants", "gguf_file": "m-Q5.gguf"}, "file", "no file m-Q5.gguf"),
        ({"repo_id": "not a repo"}, "repo_id", "not a Hugging Face repository id"),
        ({"repo_id": "a/b", "gguf_file": "../etc/passwd.gguf"}, "file", "not a .gguf file"),
    ],
)
def test_refusals_name_the_field_to_change(hub, args, field, words):
    with pytest.raises(HubError) as refused:
        hub_read(**args)
    assert refused.value.field == field and words in str(refused.value)
