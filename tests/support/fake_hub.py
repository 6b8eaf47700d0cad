"""A local Hugging Face Hub for tests: it speaks the hub's HTTP protocol as `huggingface_hub`
reads it, so the real client runs against it unchanged (point it here with HF_ENDPOINT).

What it answers, as huggingface_hub 1.x reads it (file_download.py get_hf_file_metadata,
http_get; hf_api.py model_info; utils/_http.py hf_raise_for_status):
- `GET /api/models/{repo}` and `/api/models/{repo}/revision/{rev}`: the ModelInfo JSON (id, sha,
  private, gated, siblings; with `?blobs=true` each sibling's size, blobId and lfs {sha256, size,
  pointerSize}; safetensors {parameters, total} when the test gives it).
- `HEAD|GET /{repo}/resolve/{rev}/{file}`: a small (git) file is answered here with `ETag` (its git
  blob sha1), `X-Repo-Commit`, `Content-Length` and Range support; a large (LFS) file is a 302 to
  an absolute CDN address on another host name (127.0.0.1 against the hub's localhost, as the real
  CDN is another domain, so the client drops its token there) with `X-Linked-Etag` (the sha256),
  `X-Linked-Size` and `X-Repo-Commit`.
- `GET|HEAD /cdn/{sha256}`: the bytes, with `Range` -> 206 and `Content-Range`.
- Errors with the hub's `X-Error-Code`: `GatedRepo` (401 without a token, 403 with a token that
  has no access), `RepoNotFound` (401), `RevisionNotFound` (404), `EntryNotFound` (404).

Faults a test can ask for: cut a file's body after N bytes (once), serve a file's bytes corrupted
(its headers still name the true sha256), a slow CDN (`rate`, bytes per second), a drip (`drip`:
a path prefix -> seconds between bytes: the headers at once, then the body one byte at a time, as
a hostile or broken mirror can, until the client hangs up or `drip_limit_s` passes; each drip is
recorded in `dripped` with how it ended). Every request is
logged (method, path, Range, whether it carried a token) for assertions. Files can be bytes or a
path on disk (the 250 MB test GGUF is served from the file, by ranges, never read whole).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth", ".onnx")
CHUNK = 1 << 20


@dataclass
class HubFile:
    name: str
    data: bytes | None = None
    path: Path | None = None
    lfs: bool = False
    sha256: str = ""
    git_sha1: str = ""
    size: int = 0

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the file."""
        if self.data is not None:
            return self.data[start:end]
        assert self.path is not None
        with self.path.open("rb") as handle:
            handle.seek(start)
            return handle.read(end - start)


@dataclass
class HubRepo:
    repo_id: str
    sha: str
    files: dict[str, HubFile]
    gated: bool | str = False  # False, "auto" or "manual"
    private: bool = False
    branches: dict[str, str] = field(default_factory=dict)
    safetensors: dict[str, Any] | None = None


def _hash_file(path: Path) -> tuple[str, str, int]:
    sha, size = hashlib.sha256(), 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            sha.update(chunk)
            size += len(chunk)
    git = hashlib.sha1(f"blob {size}\0".encode())  # noqa: S324 - git's own object id
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            git.update(chunk)
    return sha.hexdigest(), git.hexdigest(), size


_HASH_CACHE: dict[tuple[str, float, int], tuple[str, str, int]] = {}


def hub_file(name: str, content: bytes | Path) -> HubFile:
    if isinstance(content, Path):
        stat = content.stat()
        key = (str(content), stat.st_mtime, stat.st_size)
        if key not in _HASH_CACHE:
            _HASH_CACHE[key] = _hash_file(content)
        sha256, git_sha1, size = _HASH_CACHE[key]
        return HubFile(name, path=content, lfs=True, sha256=sha256, git_sha1=git_sha1, size=size)
    sha256 = hashlib.sha256(content).hexdigest()
    git_sha1 = hashlib.sha1(f"blob {len(content)}\0".encode() + content).hexdigest()  # noqa: S324
    lfs = name.endswith(LFS_SUFFIXES) or len(content) > 10 * CHUNK
    return HubFile(name, data=content, lfs=lfs, sha256=sha256, git_sha1=git_sha1, size=len(content))


class FakeHub:
    """Start with `FakeHub().start()`; `url` is the endpoint (HF_ENDPOINT); `stop()` at the end."""

    def __init__(self) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.tokens: dict[str, set[str]] = {}  # token -> repo ids it may read ("*" = all)
        self.cut_after: dict[str, int] = {}  # sha256 -> bytes of body to send before cutting (once)
        self.corrupt: set[str] = set()  # sha256 of files served with a flipped byte
        self.rate: float | None = None  # bytes per second of CDN bodies (None: as fast as it goes)
        self.drip: dict[str, float] = {}  # path prefix -> seconds between the body's bytes
        self.drip_limit_s = 30.0  # then the drip cuts the connection (so a test never hangs)
        self.dripped: list[dict[str, Any]] = []  # {"path", "sent", "size", "ended": "client left" | "limit"}
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.port = 0

    # set-up ------------------------------------------------------------------------
    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes | Path],
        *,
        gated: bool | str = False,
        private: bool = False,
        safetensors: dict[str, Any] | None = None,
    ) -> HubRepo:
        built = {name: hub_file(name, content) for name, content in files.items()}
        digest = hashlib.sha1(repo_id.encode())  # noqa: S324 - a stable commit id, as git's are
        for name in sorted(built):
            digest.update(f"{name}:{built[name].git_sha1}".encode())
        sha = digest.hexdigest()
        repo = HubRepo(repo_id, sha, built, gated=gated, private=private, branches={"main": sha})
        repo.safetensors = safetensors
        self.repos[repo_id] = repo
        return repo

    def grant(self, token: str, *repo_ids: str) -> None:
        self.tokens.setdefault(token, set()).update(repo_ids or {"*"})

    @property
    def url(self) -> str:
        return f"http://localhost:{self.port}"

    @property
    def cdn(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            fake = hub

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True, name="fake-hub").start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def body_requests(self, sha256: str) -> list[dict[str, Any]]:
        """The GETs of one file's bytes on the CDN, in order."""
        with self.lock:
            return [r for r in self.requests if r["method"] == "GET" and r["path"] == f"/cdn/{sha256}"]

    # lookups -----------------------------------------------------------------------
    def resolve(self, repo: HubRepo, revision: str) -> str | None:
        if revision in repo.branches:
            return repo.branches[revision]
        return repo.sha if revision == repo.sha else None

    def blob(self, sha256: str) -> HubFile | None:
        for repo in self.repos.values():
            for item in repo.files.values():
                if item.sha256 == sha256:
                    return item
        return None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return

    # plumbing ----------------------------------------------------------------------
    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _log(self) -> None:
        with self.fake.lock:
            self.fake.requests.append(
                {
                    "method": self.command,
                    "path": urlsplit(self.path).path,
                    "range": self.headers.get("Range"),
                    "token": self._token() is not None,
                    "host": self.headers.get("Host", ""),
                }
            )

    def _drip_every(self) -> float | None:
        path = unquote(urlsplit(self.path).path)
        if self.command != "GET":
            return None
        return next((every for prefix, every in self.fake.drip.items() if path.startswith(prefix)), None)

    def _drip(self, body: bytes, every: float) -> None:
        """The body one byte at a time, `every` seconds apart, until the client leaves or the limit."""
        record = {"path": urlsplit(self.path).path, "sent": 0, "size": len(body), "ended": "limit"}
        stop = time.monotonic() + self.fake.drip_limit_s
        try:
            for byte in body:
                if time.monotonic() >= stop:
                    break
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                record["sent"] += 1
                time.sleep(every)
            else:
                record["ended"] = "done"
        except (BrokenPipeError, ConnectionResetError):
            record["ended"] = "client left"
        with self.fake.lock:
            self.fake.dripped.append(record)
        self.close_connection = True
        if record["ended"] == "limit":
            self.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        every = self._drip_every()
        if every is not None and body:
            self._drip(body, every)
        elif self.command != "HEAD" and body:
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, extra: dict[str, str] | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message}
        self._send(status, {**headers, **(extra or {})}, body)

    def _json(self, data: Any) -> None:
        self._send(200, {"Content-Type": "application/json"}, json.dumps(data).encode())

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self._route()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._route()

    def _route(self) -> None:
        self._log()
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        if path.startswith("/api/models/"):
            self._model_info(path[len("/api/models/") :], query)
        elif path.startswith("/cdn/"):
            self._cdn(path[len("/cdn/") :])
        elif match := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            self._resolve(match.group(1), match.group(2), match.group(3))
        else:
            self._error(404, "NotFound", "Not found")

    # access ------------------------------------------------------------------------
    def _repo(self, repo_id: str, *, files: bool) -> HubRepo | None:
        """The repo if this request may see it (and, with `files`, read its files); else answers."""
        repo = self.fake.repos.get(repo_id)
        token = self._token()
        allowed = token is not None and bool({"*", repo_id} & self.fake.tokens.get(token, set()))
        if repo is None or (repo.private and not allowed):
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        if files and repo.gated and not allowed:
            if token is None:
                message = (
                    f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                    "to access it. Please log in."
                )
                self._error(401, "GatedRepo", message)
            else:
                message = (
                    f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                    f"Visit {self.fake.url}/{repo_id} to ask for access."
                )
                self._error(403, "GatedRepo", message)
            return None
        return repo

    # endpoints ---------------------------------------------------------------------
    def _model_info(self, rest: str, query: dict[str, list[str]]) -> None:
        repo_id, _, revision = rest.partition("/revision/")
        repo = self._repo(repo_id, files=False)
        if repo is None:
            return
        sha = self.fake.resolve(repo, revision or "main")
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for item in sorted(repo.files.values(), key=lambda f: f.name):
            sibling: dict[str, Any] = {"rfilename": item.name}
            if blobs:
                sibling.update(size=item.size, blobId=item.git_sha1)
                if item.lfs:
                    sibling["lfs"] = {"sha256": item.sha256, "size": item.size, "pointerSize": 134}
            siblings.append(sibling)
        info: dict[str, Any] = {
            "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],  # noqa: S324 - an id, not security
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": sha,
            "lastModified": "2026-01-01T00:00:00.000Z",
            "createdAt": "2026-01-01T00:00:00.000Z",
            "private": repo.private,
            "gated": repo.gated,
            "disabled": False,
            "tags": [],
            "downloads": 0,
            "likes": 0,
            "siblings": siblings,
        }
        if repo.safetensors is not None:
            info["safetensors"] = repo.safetensors
        self._json(info)

    def _resolve(self, repo_id: str, revision: str, filename: str) -> None:
        repo = self._repo(repo_id, files=True)
        if repo is None:
            return
        sha = self.fake.resolve(repo, revision)
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        item = repo.files.get(filename)
        if item is None:
            self._error(404, "EntryNotFound", f"{filename} does not exist on {revision}", {"X-Repo-Commit": sha})
            return
        common = {"X-Repo-Commit": sha, "Accept-Ranges": "bytes", "Vary": "Origin, Accept"}
        if item.lfs:
            location = f"{self.fake.cdn}/cdn/{item.sha256}?X-Amz-Expires=3600&response-content-disposition=attachment"
            headers = {
                **common,
                "Location": location,
                "ETag": f'"{item.git_sha1}"',
                "X-Linked-Etag": f'"{item.sha256}"',
                "X-Linked-Size": str(item.size),
                "Content-Type": "text/plain; charset=utf-8",
            }
            self._send(302, headers, f"Found. Redirecting to {location}".encode())
            return
        self._bytes(item, {**common, "ETag": f'"{item.git_sha1}"'})

    def _cdn(self, sha256: str) -> None:
        item = self.fake.blob(sha256)
        if item is None:
            self._error(404, "NotFound", "No such object")
            return
        self._bytes(item, {"ETag": f'"{item.sha256}"', "Accept-Ranges": "bytes"}, cdn=True)

    def _bytes(self, item: HubFile, headers: dict[str, str], *, cdn: bool = False) -> None:
        start, end, status = 0, item.size, 200
        wanted = self.headers.get("Range")
        if wanted:
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
            if not match or int(match.group(1)) >= max(item.size, 1):
                self._send(416, {"Content-Range": f"bytes */{item.size}"})
                return
            start = int(match.group(1))
            end = min(item.size, int(match.group(2)) + 1) if match.group(2) else item.size
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end - 1}/{item.size}"}
        headers = {**headers, "Content-Type": "application/octet-stream", "Content-Length": str(end - start)}
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        every = self._drip_every()
        if every is not None:
            self._drip(item.read(start, end), every)
            return
        cut = None
        if cdn and self.command == "GET":
            with self.fake.lock:
                cut = self.fake.cut_after.pop(item.sha256, None)
        corrupt = item.sha256 in self.fake.corrupt
        sent, position = 0, start
        try:
            while position < end:
                chunk = item.read(position, min(end, position + CHUNK))
                if corrupt and position <= item.size // 2 < position + len(chunk):
                    i = item.size // 2 - position
                    chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1 :]
                if cut is not None and sent + len(chunk) > cut:
                    self.wfile.write(chunk[: cut - sent])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # the peer sees the body end early
                    return
                self.wfile.write(chunk)
                sent += len(chunk)
                position += len(chunk)
                if cdn and self.fake.rate:
                    time.sleep(len(chunk) / self.fake.rate)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
