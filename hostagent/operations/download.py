"""Model downloads and deletes on this host, from the order the panel sent (serving.wire.Order).

A download fetches only the files the order names (hostagent.runtime.model_downloads) into a
folder under this host's first model folder (CONTROLPANEL_MODEL_DIRS), named after the repository
and commit, so the engine may open it. Progress (bytes, rate, file) goes through the port; the
panel's answer to a progress report can cancel it, and the parts stay on disk, so the next
download of the same model resumes where this one stopped. The hub token of a gated repository
comes with the order (the panel reveals it for this operation only) and lives in memory.

An Ollama model is pulled through the Ollama server's own API (POST /api/pull, streamed).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.hub_client import hub_endpoint
from hostagent.context import AgentContext
from hostagent.local import host_model_dirs
from hostagent.runtime.model_downloads import (
    DiskFull,
    DownloadCancelled,
    DownloadError,
    Progress,
    WantedFile,
    delete_folder,
    download_files,
)
from serving.wire import Order

from .outcome import Cancelled, Outcome, Refused

OLLAMA_URL_ENV = "OLLAMA_HOST"
LOG_EVERY_S = 5.0


def _mib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def model_folder(repo_id: str, revision: str) -> Path:
    """Where this host keeps a repository's files at a commit: its first model folder."""
    dirs = host_model_dirs()
    if not dirs:
        raise DownloadError("this host has no model folders (CONTROLPANEL_MODEL_DIRS)")
    owner, _, name = repo_id.partition("/")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", owner) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name) or ".." in repo_id:
        raise DownloadError(f"refusing a repository id that is not owner/name: {repo_id[:80]!r}")
    if not re.fullmatch(r"[0-9a-f]{40}", revision):
        raise DownloadError("a download needs the commit the catalog recorded")
    return Path(dirs[0]) / "hub" / owner / name / revision[:12]


class _Reports:
    """Progress through the port: the stage says the bytes and rate, the log a line now and then;
    each report answers whether a cancel was asked for."""

    def __init__(self, ctx: AgentContext, op_id: str) -> None:
        self.ctx, self.op_id = ctx, op_id
        self.logged = 0.0

    def __call__(self, p: Progress, message: str) -> bool:
        fraction = p.done / p.total if p.total else 0.0
        stage = f"{p.index}/{p.files} {_mib(p.done)} of {_mib(p.total)} at {_mib(p.rate)}/s"
        now = time.monotonic()
        line = None
        if message:
            line = f"[download] {message}"
        elif now - self.logged >= LOG_EVERY_S:
            line = f"[download] {p.file}: {_mib(p.done)} of {_mib(p.total)} ({fraction:.0%}) at {_mib(p.rate)}/s"
        if line:
            self.logged = now
        return self.ctx.panel.progress(self.op_id, stage=stage[:120], progress=min(1.0, fraction), log=line)


@dataclass(frozen=True)
class DownloadParams:
    """A download or delete order's parameters (deployments' download request), read once."""

    source: str = "hub"  # "hub" or "ollama" (SOURCES)
    repo_id: str = ""
    revision: str = ""  # the commit the catalog recorded
    files: tuple[dict[str, Any], ...] = ()  # WantedFile.to_dict() each
    gguf_file: str = ""
    variant: Any = None  # the catalog's variant id, handed back with the result
    tag: str = ""  # an Ollama model's tag
    path: str = ""  # what a delete removes

    @classmethod
    def of(cls, order: Order) -> DownloadParams:
        params = order.params
        source, files = params.get("source"), params.get("files")
        return cls(
            source=source if isinstance(source, str) else "hub",
            repo_id=str(params.get("repo_id") or ""),
            revision=str(params.get("revision") or ""),
            files=tuple(f for f in files if isinstance(f, dict)) if isinstance(files, list) else (),
            gguf_file=str(params.get("gguf_file") or ""),
            variant=params.get("variant"),
            tag=str(params.get("tag") or ""),
            path=str(params.get("path") or ""),
        )


def run_download(ctx: AgentContext, order: Order) -> Outcome:
    """A download from the source the order names: the hub (by default), or an Ollama server's own pull."""
    params = DownloadParams.of(order)
    return SOURCES.get(params.source, _download_from_hub)(ctx, order.id, params, order.hub_token)


def _download_from_hub(ctx: AgentContext, op_id: str, params: DownloadParams, token: str | None) -> Outcome:
    panel, repo_id, revision = ctx.panel, params.repo_id, params.revision
    try:
        files = [WantedFile.from_dict(f) for f in params.files]
        if not files:
            raise DownloadError("the order names no files to download")
        folder = model_folder(repo_id, revision)
    except DownloadError as exc:
        raise Refused(f"This host refuses the download: {exc}") from exc
    reports = _Reports(ctx, op_id)
    panel.progress(op_id, stage="starting", progress=0.0, log=f"[download] {repo_id}@{revision[:12]} into {folder}")
    try:
        result = download_files(
            repo_id=repo_id,
            revision=revision,
            files=files,
            folder=folder,
            endpoint=hub_endpoint(),
            token=token,
            on_progress=reports,
        )
    except DownloadCancelled as exc:
        raise Cancelled(str(exc), result={"folder": str(folder)}) from exc
    except DiskFull as exc:
        return Outcome.failed(f"Not enough disk: {exc}", {"folder": str(folder)})
    except DownloadError as exc:
        return Outcome.failed(str(exc), {"folder": str(folder)})
    gguf = params.gguf_file
    path = str(folder / gguf) if gguf else str(folder)
    summary = {
        "folder": result.folder,
        "path": path,
        "size": result.size,
        "bytes_fetched": result.bytes_fetched,
        "seconds": round(result.seconds, 2),
        "files": [f.to_dict() for f in result.files],
        "download": {
            "variant": params.variant,
            "path": path,
            "repo_id": repo_id,
            "revision": revision,
            "size": result.size,
            "files": [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in result.files],
            "verified": True,
        },
    }
    rate = result.bytes_fetched / result.seconds if result.seconds > 0 else 0.0
    panel.progress(
        op_id,
        stage="downloaded",
        progress=1.0,
        log=f"[download] {len(result.files)} file(s), {_mib(result.size)} at {path}; fetched "
        f"{_mib(result.bytes_fetched)} at {_mib(rate)}/s; every checksum matches the hub",
    )
    return Outcome.succeeded(summary)


def run_model_delete(ctx: AgentContext, order: Order) -> Outcome:
    op_id, path = order.id, Path(DownloadParams.of(order).path)
    if not path.is_absolute():
        raise Refused("The order names no absolute path to delete.")
    folder = path.parent if path.suffix == ".gguf" else path
    try:
        freed = delete_folder(folder, host_model_dirs())
    except DownloadError as exc:
        raise Refused(str(exc)) from exc
    ctx.panel.progress(op_id, stage="deleted", progress=1.0, log=f"[delete] {folder}: {_mib(freed)} freed")
    return Outcome.succeeded({"deleted": str(folder), "freed": freed, "model_delete": True})


def _pull_ollama(ctx: AgentContext, op_id: str, params: DownloadParams, token: str | None) -> Outcome:
    """Ollama's pull API (docs/api.md "Pull a Model"): POST /api/pull {"model", "stream": true}
    answers one JSON object per line: {"status"} lines, then per layer {"status": "pulling <digest>",
    "digest", "total", "completed"}, then "verifying sha256 digest", "writing manifest", "success";
    an {"error"} line ends it. Ollama resumes a pull's layers itself; a cancel closes the stream."""
    import httpx

    panel, tag = ctx.panel, params.tag
    base = os.environ.get(OLLAMA_URL_ENV, "http://127.0.0.1:11434")
    base = base if base.startswith("http") else f"http://{base}"
    layers: dict[str, tuple[int, int]] = {}
    started, last = time.monotonic(), 0.0
    try:
        with (
            httpx.Client(timeout=httpx.Timeout(30.0, read=600.0)) as client,
            client.stream("POST", f"{base.rstrip('/')}/api/pull", json={"model": tag, "stream": True}) as response,
        ):
            if response.status_code != 200:
                return Outcome.failed(f"Ollama answered {response.status_code} to the pull of {tag}.")
            for raw in response.iter_lines():
                if not raw.strip():
                    continue
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError:
                    continue
                if line.get("error"):
                    return Outcome.failed(f"Ollama: {str(line['error'])[:500]}")
                if line.get("digest") and isinstance(line.get("total"), int):
                    layers[line["digest"]] = (int(line.get("completed") or 0), int(line["total"]))
                done = sum(c for c, _ in layers.values())
                total = sum(t for _, t in layers.values())
                now = time.monotonic()
                if now - last >= 0.5 or line.get("status") == "success":
                    last = now
                    rate = done / (now - started) if now > started else 0.0
                    stage = f"{_mib(done)} of {_mib(total)} at {_mib(rate)}/s" if total else str(line.get("status"))
                    if panel.progress(
                        op_id,
                        stage=stage[:120],
                        progress=done / total if total else 0.0,
                        log=f"[ollama] {line.get('status')}",
                    ):
                        raise Cancelled("Cancelled; Ollama keeps the layers it has.")
                if line.get("status") == "success":
                    size = sum(t for _, t in layers.values())
                    return Outcome.succeeded(
                        {
                            "path": f"ollama:{tag}",
                            "size": size,
                            "download": {
                                "variant": params.variant,
                                "path": f"ollama:{tag}",
                                "size": size,
                                "files": [],
                                "verified": True,
                            },
                        }
                    )
    except httpx.HTTPError as exc:
        return Outcome.failed(f"Ollama at {base} did not answer: {exc}")
    return Outcome.failed(f"Ollama's pull of {tag} ended without success.")


# The order's "source" -> what fetches the model (the panel's download_request names it), with
# the operation's id, its parameters and the hub token the order carries (a gated repository's).
SOURCES: dict[str, Callable[[AgentContext, str, DownloadParams, str | None], Outcome]] = {
    "hub": _download_from_hub,
    "ollama": _pull_ollama,
}
