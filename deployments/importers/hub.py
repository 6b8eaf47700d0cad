"""Read a model's facts from a Hugging Face repository, through `huggingface_hub`, without
downloading its weights.

- `model_info` (files_metadata): the commit the revision names, every file's size and, for LFS
  files, its sha256; whether the repository is gated.
- `config.json`, `model.safetensors.index.json` (metadata.total_size: the weights' bytes),
  `generation_config.json` (sampling defaults): small files, each read with a size cap.
- A GGUF file's header by HTTP range requests on the file's (CDN) address: the first MiB, then
  more while the header runs on (vocabularies make headers of several MB), never the tensor data.

`HF_ENDPOINT` (a mirror) is read at each call, so a changed environment is honoured without a
restart; a token is passed only when given (never the machine's saved login). Every failure is a
HubError whose message says what to do, never a traceback: a missing or gated repository, a
token without access, an unknown revision or file, a hub that does not answer.

A mirror can list anything: a file name that is not a relative path inside the repository
(core.hub_paths: `..`, absolute, a backslash, a newline) is skipped and counted, never kept. Each
request has an overall deadline (hub_deadline: `deadline_s`), not only a per-read timeout, so a
server that drips a byte every few seconds ends at the deadline with a HubError saying so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from core.hub_client import hub_endpoint, transport_errors
from core.hub_paths import hub_path_problem
from deployments.importers.gguf_header import GgufHeaderError, GgufImport, GgufTruncated, read_gguf_header_bytes
from serving.engines.base import gguf_split_part
from serving.errors import FieldError

REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}/[A-Za-z0-9_.\-]{1,96}$")
REVISION_RE = re.compile(r"^[A-Za-z0-9_.\-/]{1,200}$")
MAX_SMALL_FILE = 8 * 1024 * 1024  # config / index / generation config; real ones are < 2 MB
GGUF_FIRST_READ = 1 << 20
GGUF_MAX_HEADER = 64 << 20  # the largest real headers (262k vocabularies + merges) are ~10-20 MB
TIMEOUT_S = 30.0  # per socket operation (httpx's read timeout: each byte starts it again)
DEFAULT_DEADLINE_S = 120.0  # per request, whatever the server drips (the panel's HUB_REQUEST_DEADLINE_S)
# What an engine reads besides the weights (vLLM/SGLang: config, tokenizer, chat template).
SUPPORT_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "model.safetensors.index.json",
)


class HubError(FieldError):
    """The hub refused or could not answer; `field` names the input to change."""

    field_default = "repo_id"
    field: str


@dataclass(frozen=True)
class HubFile:
    name: str
    size: int | None
    sha256: str | None = None  # LFS files: the content's sha256 (the hub's X-Linked-Etag)
    blob_id: str | None = None  # git blob sha1 (the hub's ETag for small files)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256, "blob_id": self.blob_id}


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    revision: str  # the commit sha the asked revision named
    gated: bool
    files: tuple[HubFile, ...]
    config_text: str | None = None
    index_total_size: int | None = None  # safetensors index metadata.total_size
    generation_config: dict[str, Any] = field(default_factory=dict)
    gguf_file: str | None = None
    gguf: GgufImport | None = None
    gguf_shards: tuple[str, ...] = ()
    safetensors_params: int | None = None  # the hub's own count (model_info safetensors.total)
    skipped_names: int = 0  # names the hub listed that are not relative paths in the repository

    def needed_files(self) -> list[HubFile]:
        """What an engine needs on disk: the GGUF file (all its shards), or the config, tokenizer
        and safetensors files (never other formats' copies, e.g. .bin, .pth, onnx/ or other quants)."""
        if self.gguf_file:
            names = set(self.gguf_shards or (self.gguf_file,))
            return [f for f in self.files if f.name in names]
        return [
            f for f in self.files if "/" not in f.name and (f.name in SUPPORT_FILES or f.name.endswith(".safetensors"))
        ]


def check_repo_id(repo_id: str) -> str:
    repo_id = (repo_id or "").strip()
    if repo_id.startswith(("https://", "http://")):
        repo_id = urlparse(repo_id).path.strip("/")
    if not REPO_ID_RE.fullmatch(repo_id) or ".." in repo_id or repo_id.endswith((".", "-")):
        raise HubError(f"{repo_id[:100]!r} is not a Hugging Face repository id (owner/name).")
    return repo_id


def check_revision(revision: str) -> str:
    revision = (revision or "").strip()
    if revision and (not REVISION_RE.fullmatch(revision) or ".." in revision):
        raise HubError(f"{revision[:60]!r} is not a branch, tag or commit.", field="revision")
    return revision


def check_gguf_name(name: str) -> str:
    name = (name or "").strip()
    if name and (not name.lower().endswith(".gguf") or hub_path_problem(name)):
        raise HubError(f"{ascii(name[:80])} is not a .gguf file of the repository.", field="file")
    return name


def _translate(exc: Exception, repo_id: str, *, what: str = "") -> HubError:
    from huggingface_hub import errors

    where = f" ({what})" if what else ""
    if isinstance(exc, errors.GatedRepoError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 403:
            return HubError(
                f"{repo_id} is gated and this token has no access to it: accept the model's terms on the hub with "
                "the account the token belongs to.",
                field="token",
            )
        return HubError(f"{repo_id} is gated: choose a secret holding a Hugging Face token with access.", field="token")
    if isinstance(exc, errors.RevisionNotFoundError):
        return HubError(f"{repo_id} has no revision by that name{where}.", field="revision")
    if isinstance(exc, errors.EntryNotFoundError | errors.RemoteEntryNotFoundError):
        return HubError(f"{repo_id} has no file {what or 'by that name'}.", field="file")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return HubError(
            f"No model repository {repo_id} on {hub_endpoint()} (or it is private: give a token that can read it)."
        )
    if isinstance(exc, errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        return HubError(f"The hub answered {status} for {repo_id}{where}.")
    return HubError(f"The hub at {hub_endpoint()} could not be reached: {type(exc).__name__}: {str(exc)[:200]}")


@contextmanager
def _hub_call(repo_id: str, what: str, deadline_s: float) -> Iterator[None]:
    """One request to the hub, bounded by `deadline_s` overall; its failures as HubErrors."""
    from huggingface_hub import errors

    from .hub_deadline import request_deadline

    with request_deadline(deadline_s) as deadline:
        try:
            yield
        except (errors.HfHubHTTPError, OSError, *transport_errors()) as exc:
            if deadline.passed and not isinstance(exc, errors.HfHubHTTPError):
                raise HubError(
                    f"The hub at {hub_endpoint()} did not finish answering for {repo_id} ({what or 'model info'}) "
                    f"within {deadline_s:g} s; nothing was imported. Try again later, or check the mirror "
                    "(HF_ENDPOINT)."
                ) from exc
            raise _translate(exc, repo_id, what=what) from exc


def _headers(token: str | None) -> dict[str, str]:
    from huggingface_hub.utils import build_hf_headers

    return dict(build_hf_headers(token=token or False))


def _get_small(
    repo_id: str, revision: str, filename: str, token: str | None, *, deadline_s: float = DEFAULT_DEADLINE_S
) -> str | None:
    """A small text file of the repo at `revision`, or None when it has none."""
    from huggingface_hub import errors, hf_hub_url
    from huggingface_hub.utils import get_session, hf_raise_for_status

    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=hub_endpoint())
    chunks: list[bytes] = []
    try:
        with (
            _hub_call(repo_id, filename, deadline_s),
            get_session().stream(
                "GET", url, headers=_headers(token), follow_redirects=True, timeout=TIMEOUT_S
            ) as response,
        ):
            hf_raise_for_status(response)
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_SMALL_FILE:
                    raise HubError(
                        f"{filename} of {repo_id} is larger than {MAX_SMALL_FILE // 2**20} MiB.", field="file"
                    )
                chunks.append(chunk)
    except HubError as exc:
        if isinstance(exc.__cause__, errors.EntryNotFoundError | errors.RemoteEntryNotFoundError):
            return None
        raise
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HubError(f"{filename} of {repo_id} is not UTF-8 text.", field="file") from exc


def _json_file(
    repo_id: str, revision: str, filename: str, token: str | None, *, deadline_s: float = DEFAULT_DEADLINE_S
) -> dict[str, Any] | None:
    text = _get_small(repo_id, revision, filename, token, deadline_s=deadline_s)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise HubError(f"{filename} of {repo_id} is not valid JSON.", field="file") from exc
    return data if isinstance(data, dict) else None


def _index_total(index: dict[str, Any] | None) -> int | None:
    if not index:
        return None
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if isinstance(total, bool) or not isinstance(total, int | float) or not 0 < total <= 2**50:
        return None
    return int(total)


GENERATION_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty")


def _generation(config: dict[str, Any] | None) -> dict[str, Any]:
    """The sampling defaults of generation_config.json: plain numbers only."""
    out: dict[str, Any] = {}
    for key in GENERATION_KEYS:
        value = (config or {}).get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and -1e6 < value < 1e6:
            out[key] = value
    return out


def read_gguf_remote(
    repo_id: str,
    revision: str,
    filename: str,
    token: str | None,
    *,
    file_size: int,
    shards: int = 1,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> GgufImport:
    """A GGUF header read from the hub by HTTP ranges: 1 MiB, doubling while the header runs on
    (each request bounded by `deadline_s`)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import get_session, hf_raise_for_status

    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=hub_endpoint())
    with _hub_call(repo_id, filename, deadline_s):
        meta = get_hf_file_metadata(url, token=token or False, endpoint=hub_endpoint())
    headers = _headers(token)
    location = meta.location or url
    if urlparse(location).netloc != urlparse(url).netloc:
        headers.pop("authorization", None)  # a CDN address is signed; the token stays with the hub
    want = GGUF_FIRST_READ
    while True:
        end = min(want, meta.size or want)
        data = bytearray()
        with (
            _hub_call(repo_id, filename, deadline_s),
            get_session().stream(
                "GET",
                location,
                headers={**headers, "Range": f"bytes=0-{end - 1}"},
                follow_redirects=True,
                timeout=TIMEOUT_S,
            ) as response,
        ):
            hf_raise_for_status(response)
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) >= end:  # a server that ignores Range: stop reading at `end`
                    break
        try:
            return read_gguf_header_bytes(bytes(data[:end]), name=filename, file_size=file_size, shards=shards)
        except GgufTruncated as exc:
            if meta.size is not None and end >= meta.size:
                raise HubError(f"{filename}: {exc}", field="file") from exc
            if want >= GGUF_MAX_HEADER:
                raise HubError(
                    f"{filename}: its header is over {GGUF_MAX_HEADER // 2**20} MiB; not a GGUF the panel reads.",
                    field="file",
                ) from exc
            want *= 4
        except GgufHeaderError as exc:
            raise HubError(str(exc), field="file") from exc


def _pick_gguf(repo_id: str, files: list[HubFile], wanted: str) -> tuple[str, tuple[str, ...]]:
    ggufs = [f.name for f in files if f.name.lower().endswith(".gguf") and "mmproj" not in f.name.lower()]
    if wanted:
        if wanted not in {f.name for f in files}:
            listed = ", ".join(ggufs[:20]) or "none"
            raise HubError(f"{repo_id} has no file {wanted} (GGUF files: {listed}).", field="file")
        name = wanted
    else:
        firsts = [g for g in ggufs if (part := gguf_split_part(g)) is None or part.first]
        if len(firsts) != 1:
            raise HubError(
                f"{repo_id} holds {len(firsts)} GGUF files; name the one to import (--file): {', '.join(firsts[:20])}",
                field="file",
            )
        name = firsts[0]
    split = gguf_split_part(name)
    if split is None:
        return name, (name,)
    shards = split.names()
    missing = [s for s in shards if s not in {f.name for f in files}]
    if missing:
        raise HubError(f"{repo_id} lacks shard {missing[0]} of {name}.", field="file")
    return shards[0], shards


def _hub_files(siblings: list[Any]) -> tuple[HubFile, ...]:
    """The repository's files the panel would fetch (a name hub_path_problem refuses is left out)."""
    return tuple(
        HubFile(
            name=s.rfilename,
            size=s.size,
            sha256=(s.lfs.sha256 if s.lfs is not None else None),
            blob_id=s.blob_id,
        )
        for s in siblings
        if hub_path_problem(s.rfilename) is None
    )


def _weights_total(index: dict[str, Any] | None, files: tuple[HubFile, ...]) -> int | None:
    """The weights' bytes: the safetensors index's total, else the sum of the top-level
    .safetensors files' sizes when the hub gave every one."""
    total = _index_total(index)
    if total is None:
        sizes = [f.size for f in files if f.name.endswith(".safetensors") and "/" not in f.name]
        if sizes and all(isinstance(s, int) for s in sizes):
            total = sum(s for s in sizes if s is not None)
    return total


def hub_read(
    repo_id: str,
    *,
    revision: str = "",
    gguf_file: str = "",
    token: str | None = None,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> HubModel:
    """Everything the catalog records about a repository at `revision` (default: main); each
    request to the hub ends within `deadline_s`."""
    from huggingface_hub import HfApi

    repo_id = check_repo_id(repo_id)
    revision = check_revision(revision)
    gguf_file = check_gguf_name(gguf_file)
    api = HfApi(endpoint=hub_endpoint(), token=token or False)
    with _hub_call(repo_id, revision, deadline_s):
        info = api.model_info(repo_id, revision=revision or None, files_metadata=True, timeout=TIMEOUT_S)
    sha = info.sha or ""
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise HubError(f"The hub did not name the commit of {repo_id} at {revision or 'main'}.", field="revision")
    siblings = info.siblings or []
    files = _hub_files(siblings)
    skipped = len(siblings) - len(files)
    names = {f.name for f in files}
    gated = bool(info.gated)
    params = None
    if info.safetensors is not None and isinstance(info.safetensors.total, int):
        params = info.safetensors.total
    wants_gguf = bool(gguf_file) or ("config.json" not in names and any(n.lower().endswith(".gguf") for n in names))
    if wants_gguf:
        name, shards = _pick_gguf(repo_id, list(files), gguf_file)
        sizes = {f.name: f.size for f in files}
        total = sum(sizes.get(s) or 0 for s in shards)
        header = read_gguf_remote(repo_id, sha, name, token, file_size=total, shards=len(shards), deadline_s=deadline_s)
        return HubModel(
            repo_id=repo_id,
            revision=sha,
            gated=gated,
            files=files,
            gguf_file=name,
            gguf=header,
            gguf_shards=shards if len(shards) > 1 else (),
            generation_config={},
            safetensors_params=params,
            skipped_names=skipped,
        )
    if "config.json" not in names:
        raise HubError(f"{repo_id} has neither a config.json nor a GGUF file: not a model the panel can serve.")
    config_text = _get_small(repo_id, sha, "config.json", token, deadline_s=deadline_s)

    def listed_json(filename: str) -> Any:
        """A JSON file of the repository if it lists one (None if not)."""
        return _json_file(repo_id, sha, filename, token, deadline_s=deadline_s) if filename in names else None

    index = listed_json("model.safetensors.index.json")
    generation = listed_json("generation_config.json")
    return HubModel(
        repo_id=repo_id,
        revision=sha,
        gated=gated,
        files=files,
        config_text=config_text,
        index_total_size=_weights_total(index, files),
        generation_config=_generation(generation),
        safetensors_params=params,
        skipped_names=skipped,
    )
