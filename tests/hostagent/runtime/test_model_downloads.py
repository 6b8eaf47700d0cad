"""Downloads onto a host's disk (hostagent.runtime.model_downloads) with the real huggingface_hub
client against the local hub (tests/support/fake_hub.py), serving the real 253 MB Gemma GGUF:
progress in bytes, a body cut mid-way, a cancel and a later resume with Range, a corrupted file,
a disk too small (a real 64 MiB tmpfs), a gated repository without a token."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from hostagent.runtime.model_downloads import (
    PART_DIR,
    ChecksumMismatch,
    DiskFull,
    DownloadCancelled,
    DownloadError,
    Progress,
    WantedFile,
    download_files,
)
from tests.support.fake_hub import FakeHub
from tests.support.llama import gemma_model_path

REPO = "unsloth/gemma-3-270m-it-GGUF"
GGUF = "gemma-3-270m-it-Q4_K_M.gguf"
MiB = 2**20


@pytest.fixture
def hub():
    hub = FakeHub().start()
    hub.add_repo(REPO, {GGUF: Path(gemma_model_path()), "README.md": b"# quants\n"})
    hub.add_repo("acme/gated", {"config.json": b'{"model_type": "llama"}'}, gated="manual")
    yield hub
    hub.stop()


def wanted(hub: FakeHub, *names: str) -> list[WantedFile]:
    files = hub.repos[REPO].files
    return [WantedFile(n, files[n].size, files[n].sha256 if files[n].lfs else None, files[n].git_sha1) for n in names]


class Recorder:
    def __init__(self, cancel_after: int | None = None) -> None:
        self.seen: list[tuple[int, int, str]] = []
        self.cancel_after = cancel_after

    def __call__(self, p: Progress, message: str) -> bool:
        self.seen.append((p.done, p.total, message))
        return self.cancel_after is not None and p.done >= self.cancel_after


def fetch(hub: FakeHub, folder: Path, on_progress, names=(GGUF, "README.md"), token=None):
    return download_files(
        repo_id=REPO,
        revision=hub.repos[REPO].sha,
        files=wanted(hub, *names),
        folder=folder,
        endpoint=hub.url,
        token=token,
        on_progress=on_progress,
    )


def test_only_the_named_files_arrive_verified_with_progress_in_bytes(hub, tmp_path):
    rec = Recorder()
    result = fetch(hub, tmp_path / "m", rec)
    item = hub.repos[REPO].files[GGUF]
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [PART_DIR, "README.md", GGUF]
    assert result.size == item.size + 9 and result.bytes_fetched == result.size
    assert [f.verified_by for f in result.files] == ["sha256", "git-sha1"]
    assert hashlib.sha256((tmp_path / "m" / GGUF).read_bytes()).hexdigest() == item.sha256
    done = [d for d, _, _ in rec.seen]
    assert done == sorted(done) and done[-1] == result.size and rec.seen[-1][1] == result.size
    assert any("sha256 matches" in m for _, _, m in rec.seen)
    # A second download finds everything in place: nothing is fetched again.
    again = fetch(hub, tmp_path / "m", Recorder())
    assert again.bytes_fetched == 0 and all(f.skipped for f in again.files)


def test_a_cancelled_download_resumes_where_it_stopped(hub, tmp_path):
    item = hub.repos[REPO].files[GGUF]
    with pytest.raises(DownloadCancelled):
        fetch(hub, tmp_path / "m", Recorder(cancel_after=80 * MiB), names=(GGUF,))
    part = tmp_path / "m" / PART_DIR / f"{GGUF}.part"
    kept = part.stat().st_size
    assert 80 * MiB <= kept < item.size and not (tmp_path / "m" / GGUF).exists()
    result = fetch(hub, tmp_path / "m", Recorder(), names=(GGUF,))
    assert hub.body_requests(item.sha256)[-1]["range"] == f"bytes={kept}-"
    assert result.bytes_fetched == item.size - kept and result.files[0].resumed_at == kept
    assert hashlib.sha256((tmp_path / "m" / GGUF).read_bytes()).hexdigest() == item.sha256


def test_a_connection_cut_mid_way_is_resumed_by_range(hub, tmp_path):
    item = hub.repos[REPO].files[GGUF]
    hub.cut_after[item.sha256] = 100 * MiB
    result = fetch(hub, tmp_path / "m", Recorder(), names=(GGUF,))
    ranges = [r["range"] for r in hub.body_requests(item.sha256)]
    assert ranges == [None, f"bytes={100 * MiB}-"]
    assert result.files[0].sha256 == item.sha256


def test_a_corrupted_file_fails_its_checksum_and_is_deleted(hub, tmp_path):
    item = hub.repos[REPO].files[GGUF]
    hub.corrupt.add(item.sha256)
    with pytest.raises(ChecksumMismatch) as bad:
        fetch(hub, tmp_path / "m", Recorder(), names=(GGUF,))
    assert "is not the hub's" in str(bad.value)
    assert not (tmp_path / "m" / GGUF).exists()
    assert not (tmp_path / "m" / PART_DIR / f"{GGUF}.part").exists()  # a bad part is not resumed


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(  # noqa: S603 - fixed argv
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"mounting a 64 MiB tmpfs needs root with CAP_SYS_ADMIN: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)  # noqa: S603, S607


def test_a_disk_too_small_is_refused_before_the_first_byte(hub, small_disk):
    item = hub.repos[REPO].files[GGUF]
    with pytest.raises(DiskFull) as full:
        fetch(hub, small_disk / "m", Recorder(), names=(GGUF,))
    assert f"{item.size:,} bytes still to download" in str(full.value)
    assert hub.body_requests(item.sha256) == []


def test_a_gated_repository_without_a_token_is_refused(hub, tmp_path):
    files = [WantedFile("config.json", 23, None, hub.repos["acme/gated"].files["config.json"].git_sha1)]
    with pytest.raises(DownloadError) as refused:
        download_files(
            repo_id="acme/gated",
            revision=hub.repos["acme/gated"].sha,
            files=files,
            folder=tmp_path / "g",
            endpoint=hub.url,
            token=None,
            on_progress=Recorder(),
        )
    assert "gated" in str(refused.value)


def test_a_file_name_that_leaves_the_folder_is_refused():
    with pytest.raises(DownloadError):
        WantedFile.from_dict({"name": "../../etc/cron.d/x", "size": 1})
    with pytest.raises(DownloadError):
        WantedFile.from_dict({"name": "/etc/passwd", "size": 1})


@pytest.mark.parametrize("name", ["a\nb.json", ".download/verified.txt", "sub//x", "./x", "x\\..\\y", "\u202ex"])
def test_a_name_that_is_not_a_plain_relative_path_is_refused(name):
    with pytest.raises(DownloadError) as refused:
        WantedFile.from_dict({"name": name, "size": 1})
    assert "\n" not in str(refused.value)  # the refusal shows the name escaped, never a raw newline


def test_the_host_checks_again_where_each_file_lands(hub, tmp_path):
    """A hostile name stored before the import checked names, or a link already in the folder,
    cannot make a download write outside the model folder: refused before the first byte."""
    hub.add_repo("evil/escape", {"sub/README.md": b"planted\n", "../escaped.md": b"planted\n"})
    repo = hub.repos["evil/escape"]
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tmp_path / "models" / "m"
    folder.mkdir(parents=True)
    (folder / "sub").symlink_to(outside)  # e.g. left there by someone with a shell on the host
    for name in ("sub/README.md", "../escaped.md"):
        item = repo.files[name]
        with pytest.raises(DownloadError) as refused:
            download_files(
                repo_id="evil/escape",
                revision=repo.sha,
                files=[WantedFile(name, item.size, None, item.git_sha1)],  # as a stored order would hold it
                folder=folder,
                endpoint=hub.url,
                token=None,
                on_progress=Recorder(),
            )
        assert "refusing" in str(refused.value)
    assert list(outside.iterdir()) == [] and not (tmp_path / "models" / "escaped.md").exists()
    assert not [r for r in hub.requests if "/resolve/" in r["path"]]  # refused before asking the hub
