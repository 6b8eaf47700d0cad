"""The local hub (tests/support/fake_hub.py) speaks the protocol `huggingface_hub` reads: the real
client, unchanged, reads model info, resolves files (small ones with their git ETag, LFS ones by a
302 to a CDN on another host name), downloads with Range, refuses a gated repository without a
token, and resumes a body cut mid-way. What the other hub tests build on."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.support.fake_hub import FakeHub
from tests.support.llama import gemma_model_path

CONFIGS = Path(__file__).resolve().parent / "fixtures" / "configs"


@pytest.fixture
def hub():
    hub = FakeHub().start()
    hub.add_repo(
        "google/gemma-3-270m-GGUF",
        {"gemma-3-270m-Q4_K_M.gguf": Path(gemma_model_path()), "README.md": b"# Gemma 3 270M\n"},
    )
    hub.add_repo(
        "Qwen/Qwen3-32B-AWQ",
        {"config.json": (CONFIGS / "qwen3-32b-awq.json").read_bytes(), "model.safetensors": b"\0" * 4096},
    )
    hub.add_repo("meta/gated-model", {"config.json": (CONFIGS / "gemma3-270m.json").read_bytes()}, gated="manual")
    hub.grant("hf_good", "meta/gated-model")
    hub.grant("hf_other", "Qwen/Qwen3-32B-AWQ")
    yield hub
    hub.stop()


def test_model_info_lists_files_with_sizes_and_lfs_checksums(hub):
    from huggingface_hub import HfApi

    info = HfApi(endpoint=hub.url, token=False).model_info("google/gemma-3-270m-GGUF", files_metadata=True)
    repo = hub.repos["google/gemma-3-270m-GGUF"]
    assert info.sha == repo.sha
    gguf = next(s for s in info.siblings if s.rfilename.endswith(".gguf"))
    assert gguf.size == Path(gemma_model_path()).stat().st_size
    assert gguf.lfs is not None and gguf.lfs.sha256 == repo.files["gemma-3-270m-Q4_K_M.gguf"].sha256
    readme = next(s for s in info.siblings if s.rfilename == "README.md")
    assert readme.lfs is None and readme.blob_id == repo.files["README.md"].git_sha1


def test_lfs_file_metadata_comes_from_the_redirect(hub):
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    repo = hub.repos["google/gemma-3-270m-GGUF"]
    url = hf_hub_url("google/gemma-3-270m-GGUF", "gemma-3-270m-Q4_K_M.gguf", endpoint=hub.url)
    meta = get_hf_file_metadata(url, token=False, endpoint=hub.url)
    assert meta.commit_hash == repo.sha
    assert meta.etag == repo.files["gemma-3-270m-Q4_K_M.gguf"].sha256
    assert meta.size == repo.files["gemma-3-270m-Q4_K_M.gguf"].size
    assert meta.location.startswith(hub.cdn + "/cdn/")  # another host name: the client drops its token there


def test_hf_hub_download_of_a_small_file_checks_its_git_etag(hub, tmp_path):
    from huggingface_hub import hf_hub_download

    path = hf_hub_download("Qwen/Qwen3-32B-AWQ", "config.json", endpoint=hub.url, local_dir=tmp_path, token=False)
    assert Path(path).read_bytes() == (CONFIGS / "qwen3-32b-awq.json").read_bytes()


def test_gated_repo_without_a_token_is_401_and_with_a_foreign_token_403(hub, tmp_path):
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import GatedRepoError

    # The card is public; the files are not.
    assert HfApi(endpoint=hub.url, token=False).model_info("meta/gated-model").gated == "manual"
    with pytest.raises(GatedRepoError) as no_token:
        hf_hub_download("meta/gated-model", "config.json", endpoint=hub.url, local_dir=tmp_path, token=False)
    assert no_token.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as foreign:
        hf_hub_download("meta/gated-model", "config.json", endpoint=hub.url, local_dir=tmp_path, token="hf_other")
    assert foreign.value.response.status_code == 403
    path = hf_hub_download("meta/gated-model", "config.json", endpoint=hub.url, local_dir=tmp_path, token="hf_good")
    assert Path(path).is_file()


def test_a_body_cut_mid_way_is_resumed_with_a_range(hub, tmp_path):
    from huggingface_hub import hf_hub_download

    item = hub.repos["google/gemma-3-270m-GGUF"].files["gemma-3-270m-Q4_K_M.gguf"]
    hub.cut_after[item.sha256] = 50 * 2**20
    path = hf_hub_download(
        "google/gemma-3-270m-GGUF", "gemma-3-270m-Q4_K_M.gguf", endpoint=hub.url, local_dir=tmp_path, token=False
    )
    gets = hub.body_requests(item.sha256)
    assert [g["range"] for g in gets] == [None, f"bytes={50 * 2**20}-"]
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    assert digest == item.sha256
