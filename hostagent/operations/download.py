"""Model downloads and deletes on this host, from the plain order the panel sent.

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


def run_download(ctx: AgentContext, order: dict[str, Any]) -> None:
    """A download from the source the order names: the hub (by default), or an Ollama server's own pull."""
    source = (order.get("params") or {}).get("source")
    SOURCES.get(source if isinstance(source, str) else "hub", _download_from_hub)(ctx, order)


def _download_from_hub(ctx: AgentContext, order: dict[str, Any]) -> None:
    op_id, params, panel = order["id"], order.get("params") or {}, ctx.panel
    token = order.get("hub_token") or None
    repo_id, revision = str(params.get("repo_id") or ""), str(params.get("revision") or "")
    try:
        files = [WantedFile.from_dict(f) for f in params.get("files") or [] if isinstance(f, dict)]
        if not files:
            raise DownloadError("the order names no files to download")
        folder = model_folder(repo_id, revision)
    except DownloadError as exc:
        panel.finish(op_id, state="failed", error=f"This host refuses the download: {exc}")
        return
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
        panel.finish(op_id, state="cancelled", error=str(exc), result={"folder": str(folder)})
        return
    except DiskFull as exc:
        panel.finish(op_id, state="failed", error=f"Not enough disk: {exc}", result={"folder": str(folder)})
        return
    except DownloadError as exc:
        panel.finish(op_id, state="failed", error=str(exc), result={"folder": str(folder)})
        return
    gguf = params.get("gguf_file") or ""
    path = str(folder / gguf) if gguf else str(folder)
    summary = {
        "folder": result.folder,
        "path": path,
        "size": result.size,
        "bytes_fetched": result.bytes_fetched,
        "seconds": round(result.seconds, 2),
        "files": [f.to_dict() for f in result.files],
        "download": {
            "variant": params.get("variant"),
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
    panel.finish(op_id, state="succeeded", result=summary)


def run_model_delete(ctx: AgentContext, order: dict[str, Any]) -> None:
    op_id, params = order["id"], order.get("params") or {}
    path = Path(str(params.get("path") or ""))
    if not path.is_absolute():
        ctx.panel.finish(op_id, state="failed", error="The order names no absolute path to delete.")
        return
    folder = path.parent if path.suffix == ".gguf" else path
    try:
        freed = delete_folder(folder, host_model_dirs())
    except DownloadError as exc:
        ctx.panel.finish(op_id, state="failed", error=str(exc))
        return
    ctx.panel.progress(op_id, stage="deleted", progress=1.0, log=f"[delete] {folder}: {_mib(freed)} freed")
    ctx.panel.finish(op_id, state="succeeded", result={"deleted": str(folder), "freed": freed, "model_delete": True})


def _pull_ollama(ctx: AgentContext, order: dict[str, Any]) -> None:
    """Ollama's pull API (docs/api.md "Pull a Model"): POST /api/pull {"model", "stream": true}
    answers one JSON object per line: {"status"} lines, then per layer {"status": "pulling <digest>",
    "digest", "total", "completed"}, then "verifying sha256 digest", "writing manifest", "success";
    an {"error"} line ends it. Ollama resumes a pull's layers itself; a cancel closes the stream."""
    import httpx

    op_id, params, panel = order["id"], order.get("params") or {}, ctx.panel
    tag = str(params.get("tag") or "")
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
                panel.finish(
                    op_id, state="failed", error=f"Ollama answered {response.status_code} to the pull of {tag}."
                )
                return
            for raw in response.iter_lines():
                if not raw.strip():
                    continue
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError:
                    continue
                if line.get("error"):
                    panel.finish(op_id, state="failed", error=f"Ollama: {str(line['error'])[:500]}")
                    return
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
                        panel.finish(op_id, state="cancelled", error="Cancelled; Ollama keeps the layers it has.")
                        return
                if line.get("status") == "success":
                    size = sum(t for _, t in layers.values())
                    panel.finish(
                        op_id,
                        state="succeeded",
                        result={
                            "path": f"ollama:{tag}",
                            "size": size,
                            "download": {
                                "variant": params.get("variant"),
                                "path": f"ollama:{tag}",
                                "size": size,
                                "files": [],
                                "verified": True,
                            },
                        },
                    )
                    return
    except httpx.HTTPError as exc:
        panel.finish(op_id, state="failed", error=f"Ollama at {base} did not answer: {exc}")
        return
    panel.finish(op_id, state="failed", error=f"Ollama's pull of {tag} ended without success.")


# The order's "source" -> what fetches the model (the panel's download_request names it).
SOURCES: dict[str, Callable[[AgentContext, dict[str, Any]], None]] = {
    "hub": _download_from_hub,
    "ollama": _pull_ollama,
}
