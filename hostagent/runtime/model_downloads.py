"""Fetch a model's files from a Hugging Face hub onto this host's disk (runs on the host; no ORM).

`huggingface_hub` does the hub's protocol: `get_hf_file_metadata` (HEAD /resolve: the commit,
the ETag, the size, the CDN address of an LFS file) and `http_get` (the body, with Range when a
part is already on disk, and its own retries when the connection drops mid-way). What it does not
do, this module does:
- a part survives the process: bytes land in `<folder>/.download/<name>.part` and a later
  download (after a cancel, a crash, a restart) asks only for the rest (`Range: bytes=N-`);
- progress in bytes and rate through a callback, which can also stop it (cancel);
- a free-space preflight over everything still to fetch, before the first byte;
- the checksum, against the hub's: the sha256 of an LFS file (its X-Linked-Etag, as the model
  info lists it), the git blob sha1 of a small file (its ETag); a mismatch deletes the file;
- only the files asked for (one GGUF quant, or config + tokenizer + safetensors).
A token is given per call and kept in memory only.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.atomicfile import write_atomic
from core.hub_client import transport_errors
from core.hub_paths import hub_path_problem

from .errors import HostRuntimeError

PART_DIR = ".download"
RESERVE_ENV = "CONTROLPANEL_DOWNLOAD_RESERVE_BYTES"
DEFAULT_RESERVE = 256 * 2**20  # room left free on the disk after a download
REPORT_EVERY_S = 0.5


class DownloadError(HostRuntimeError):
    """The download cannot go on (its message says why, for the operation's error)."""


class DownloadCancelled(DownloadError):
    """Someone asked the panel to cancel; the parts stay for a later download to resume."""


class DiskFull(DownloadError):
    pass


class ChecksumMismatch(DownloadError):
    pass


@dataclass(frozen=True)
class WantedFile:
    name: str
    size: int | None
    sha256: str | None = None
    blob_id: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WantedFile:
        name = _checked_name(data.get("name"))
        size = data.get("size")
        sha = data.get("sha256")
        blob = data.get("blob_id")
        return cls(
            name=name,
            size=int(size) if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
            sha256=sha.lower() if isinstance(sha, str) and re.fullmatch(r"[0-9a-fA-F]{64}", sha) else None,
            blob_id=blob.lower() if isinstance(blob, str) and re.fullmatch(r"[0-9a-fA-F]{40}", blob) else None,
        )


@dataclass
class Progress:
    """What a progress callback sees: bytes done of all files, the rate, the current file."""

    total: int
    done: int = 0
    file: str = ""
    index: int = 0
    files: int = 0
    started: float = field(default_factory=time.monotonic)
    resumed_from: int = 0  # bytes already on disk when this download began

    @property
    def rate(self) -> float:
        """Bytes per second fetched in this run (bytes found on disk do not count)."""
        elapsed = time.monotonic() - self.started
        return (self.done - self.resumed_from) / elapsed if elapsed > 0 else 0.0


# progress callback: returns True to cancel
OnProgress = Callable[[Progress, str], bool]


@dataclass(frozen=True)
class FetchedFile:
    name: str
    size: int
    sha256: str | None
    verified_by: str  # "sha256" | "git-sha1"
    resumed_at: int = 0  # bytes that were already there (0: fetched whole)
    skipped: bool = False  # already complete and verified on disk

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class DownloadResult:
    folder: str
    files: tuple[FetchedFile, ...]
    bytes_fetched: int
    seconds: float

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def _reserve() -> int:
    text = os.environ.get(RESERVE_ENV, "").strip()
    return int(text) if text.isdigit() else DEFAULT_RESERVE


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _git_sha1(path: Path) -> str:
    prefix = f"blob {path.stat().st_size}\0".encode()
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, lambda: hashlib.sha1(prefix)).hexdigest()  # noqa: S324 - git's object id


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _checked_name(name: object) -> str:
    """`name` if it is a relative path inside the repository (core.hub_paths) and not in the
    download's own folder; else a DownloadError that shows it escaped."""
    problem = hub_path_problem(name)
    if problem is None and isinstance(name, str) and name.split("/")[0] == PART_DIR:
        problem = "it names the download's own folder"
    if problem or not isinstance(name, str):
        raise DownloadError(f"refusing a file name that is not a plain relative path ({problem}): {ascii(name)[:80]}")
    return name


def target_inside(folder: Path, name: str) -> Path:
    """Where `name` lands under `folder`, checked again on the disk as it is now: a name that
    escapes (by its text, or through a link already in the folder) is a DownloadError."""
    _checked_name(name)
    root = Path(os.path.realpath(folder))
    target = Path(os.path.realpath(root / name))
    if root not in target.parents or target.parts[len(root.parts)] == PART_DIR:
        raise DownloadError(f"refusing {ascii(name)[:80]}: it would be written outside the model folder")
    return target


def free_bytes(folder: Path) -> int:
    return shutil.disk_usage(_existing_parent(folder)).free


def _verified_marker(folder: Path) -> Path:
    return folder / PART_DIR / "verified.txt"


def _read_verified(folder: Path) -> dict[str, str]:
    try:
        lines = _verified_marker(folder).read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split(" ", 1)[::-1] for line in lines if " " in line)  # "<digest> <name>"


def _write_verified(folder: Path, verified: dict[str, str]) -> None:
    marker = _verified_marker(folder)
    marker.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(marker, "".join(f"{digest} {name}\n" for name, digest in sorted(verified.items())))


class _Sink:
    """The part file as `http_get` writes it: every write counts toward progress, and a cancel
    asked through the callback stops the transfer (DownloadCancelled propagates out of http_get,
    which retries network errors only)."""

    def __init__(self, handle: Any, progress: Progress, on_progress: OnProgress, base: int) -> None:
        self.handle = handle
        self.progress = progress
        self.on_progress = on_progress
        self.base = base  # progress.done before this file
        self.last = 0.0

    def write(self, data: bytes) -> int:
        try:
            written = self.handle.write(data)
        except OSError as exc:
            if exc.errno == 28:  # ENOSPC: something else filled the disk after the preflight
                raise DiskFull(f"the disk filled up while writing {self.progress.file}: {exc.strerror}") from exc
            raise
        self.progress.done = self.base + self.handle.tell()
        now = time.monotonic()
        if now - self.last >= REPORT_EVERY_S:
            self.last = now
            if self.on_progress(self.progress, ""):
                raise DownloadCancelled("cancelled while downloading; the part stays on disk for a later download")
        return int(written)

    def seek(self, *args: Any) -> int:
        return int(self.handle.seek(*args))

    def truncate(self, *args: Any) -> int:
        result = int(self.handle.truncate(*args))
        self.progress.done = self.base + self.handle.tell()  # the server ignored Range: starts again
        return result

    def tell(self) -> int:
        return int(self.handle.tell())

    def flush(self) -> None:
        self.handle.flush()


def _url(endpoint: str, repo_id: str, revision: str, name: str) -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, name, revision=revision, endpoint=endpoint)


def _check(path: Path, wanted: WantedFile, etag: str | None) -> tuple[str | None, str]:
    """(sha256 or None, how it was verified); raises ChecksumMismatch."""
    expected_sha = wanted.sha256 or (etag if etag and re.fullmatch(r"[0-9a-f]{64}", etag) else None)
    if expected_sha:
        return _verified(path, wanted.name, expected_sha, _sha256, "sha256", shown=16), "sha256"
    expected_git = wanted.blob_id or (etag if etag and re.fullmatch(r"[0-9a-f]{40}", etag) else None)
    if expected_git:
        _verified(path, wanted.name, expected_git, _git_sha1, "git blob", shown=12)
        return None, "git-sha1"
    raise ChecksumMismatch(f"{wanted.name}: the hub gave no checksum to verify it against")


def _verified(path: Path, name: str, expected: str, digest: Callable[[Path], str], what: str, *, shown: int) -> str:
    """The file's digest, once it is the one expected (ChecksumMismatch naming both otherwise)."""
    found = digest(path)
    if found != expected:
        raise ChecksumMismatch(
            f"{name}: {what} {found[:shown]}… is not the hub's {expected[:shown]}…; the file was deleted"
        )
    return found


def download_files(
    *,
    repo_id: str,
    revision: str,
    files: list[WantedFile],
    folder: Path,
    endpoint: str,
    token: str | None,
    on_progress: OnProgress,
) -> DownloadResult:
    """Fetch `files` of `repo_id` at `revision` into `folder`, resuming parts, verifying each."""
    from huggingface_hub import errors, get_hf_file_metadata
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers, disable_progress_bars  # type: ignore[attr-defined]

    disable_progress_bars()
    refused: tuple[type[BaseException], ...] = (errors.HfHubHTTPError, *transport_errors())
    folder.mkdir(parents=True, exist_ok=True)
    parts = folder / PART_DIR
    parts.mkdir(exist_ok=True)
    verified = _read_verified(folder)
    started = time.monotonic()

    for w in files:
        target_inside(folder, w.name)  # every name, before the first byte

    def final(w: WantedFile) -> Path:
        return target_inside(folder, w.name)

    def part(w: WantedFile) -> Path:
        return parts / (w.name.replace("/", "__") + ".part")

    def complete(w: WantedFile) -> bool:
        path = final(w)
        return path.is_file() and (w.size is None or path.stat().st_size == w.size) and w.name in verified

    on_disk = sum(
        (final(w).stat().st_size if complete(w) else (part(w).stat().st_size if part(w).exists() else 0)) for w in files
    )
    total = sum(w.size or 0 for w in files)
    need = max(0, total - on_disk)
    free = free_bytes(folder)
    reserve = _reserve()
    if need + reserve > free:
        raise DiskFull(
            f"{need:,} bytes still to download (of {total:,}) but {free:,} bytes are free on the disk holding "
            f"{folder} (keeping {reserve:,} free): make room or choose another model folder"
        )
    progress = Progress(total=total, done=on_disk, files=len(files), resumed_from=on_disk)
    fetched: list[FetchedFile] = []
    bytes_fetched = 0
    for index, wanted in enumerate(files, 1):
        progress.index, progress.file = index, wanted.name
        if complete(wanted):
            fetched.append(
                FetchedFile(
                    wanted.name,
                    final(wanted).stat().st_size,
                    wanted.sha256,
                    "sha256" if wanted.sha256 else "git-sha1",
                    skipped=True,
                )
            )
            continue
        url = _url(endpoint, repo_id, revision, wanted.name)
        headers = dict(build_hf_headers(token=token or False))
        try:
            meta = get_hf_file_metadata(url, token=token or False, endpoint=endpoint)
        except errors.GatedRepoError as exc:
            raise DownloadError(
                f"{repo_id} is gated: the token given has no access ({exc.response.status_code})"
            ) from exc
        except refused as exc:
            raise DownloadError(
                f"{wanted.name}: the hub refused or did not answer: {str(exc).splitlines()[0][:200]}"
            ) from exc
        if meta.commit_hash and revision and re.fullmatch(r"[0-9a-f]{40}", revision) and meta.commit_hash != revision:
            raise DownloadError(f"{wanted.name}: the hub answered for commit {meta.commit_hash}, not {revision}")
        if wanted.size is not None and meta.size is not None and meta.size != wanted.size:
            raise DownloadError(f"{wanted.name}: the hub says {meta.size:,} bytes, the catalog {wanted.size:,}")
        location = meta.location or url
        from urllib.parse import urlparse

        if urlparse(location).netloc != urlparse(url).netloc:
            headers.pop("authorization", None)  # a signed CDN address: the token stays with the hub
        part_path = part(wanted)
        resumed = part_path.stat().st_size if part_path.exists() else 0
        if meta.size is not None and resumed > meta.size:
            part_path.unlink()
            resumed = 0
        base = progress.done - resumed
        on_progress(progress, f"{wanted.name}: " + (f"resuming at {resumed:,} bytes" if resumed else "starting"))
        with part_path.open("ab") as handle:
            sink = _Sink(handle, progress, on_progress, base)
            try:
                http_get(
                    location,
                    sink,  # type: ignore[arg-type]
                    resume_size=resumed,
                    headers=headers,
                    expected_size=meta.size,
                    displayed_filename=wanted.name,
                )
            except refused as exc:
                raise DownloadError(f"{wanted.name}: the download failed: {str(exc).splitlines()[0][:200]}") from exc
            except OSError as exc:
                if exc.errno == 28:
                    raise DiskFull(f"the disk filled up while writing {wanted.name}") from exc
                raise
        size = part_path.stat().st_size
        bytes_fetched += size - resumed
        if meta.size is not None and size != meta.size:
            raise DownloadError(
                f"{wanted.name}: {size:,} bytes arrived, the hub said {meta.size:,}; run it again to resume"
            )
        on_progress(progress, f"{wanted.name}: verifying the checksum")
        try:
            sha, how = _check(part_path, wanted, meta.etag)
        except ChecksumMismatch:
            part_path.unlink(missing_ok=True)
            raise
        target = final(wanted)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part_path, target)
        verified[wanted.name] = sha or (wanted.blob_id or meta.etag or "")
        _write_verified(folder, verified)
        fetched.append(FetchedFile(wanted.name, size, sha, how, resumed_at=resumed))
        progress.done = base + size
        on_progress(progress, f"{wanted.name}: done, {how} matches the hub")
    return DownloadResult(str(folder), tuple(fetched), bytes_fetched, time.monotonic() - started)


def delete_folder(folder: Path, model_dirs: list[str]) -> int:
    """Delete a downloaded model's folder (inside the model folders only); returns the bytes freed."""
    real = Path(os.path.realpath(folder))
    roots = [Path(os.path.realpath(d)) for d in model_dirs]
    if not any(root in real.parents for root in roots):
        raise DownloadError(f"{folder} is not inside this host's model folders; nothing was deleted")
    if not real.exists():
        return 0
    size = sum(p.stat().st_size for p in real.rglob("*") if p.is_file() and not p.is_symlink())
    if real.is_dir():
        shutil.rmtree(real)
    else:
        real.unlink()
    return size
