"""What in a revision could reach beyond serving a model, and who may allow it (pure).

An operator may serve models. Three things go further, and each is a `Concern`:

- **path**: a value the engine opens as a file or folder (a GGUF, a projector, a chat
  template file, a cache folder, a local model folder). It must lie under the host's
  model folders: the panel checks the text when the revision is created, and the host
  checks again, with symlinks resolved, before the engine starts.
- **code**: a setting that makes the engine run code it downloads or reads
  (`trust_remote_code`, overrides that point the config at another repository, a draft
  model from another repository). Only an admin may create such a revision.
- **privileged**: an environment variable the policy does not know (envpolicy.py).
  Only an admin may set one.

Values that are neither a repository id nor an absolute path, but would still be read as
a relative path (`../x`, `a/b/c`, `~/x`), are refused outright. A bare file name
(`model.gguf`) is read inside the host's first model folder, which the host makes the
engine's working directory.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any

from serving.engines.base import Concern as Concern  # re-exported: adapters import it here
from serving.engines.base import EngineConfig, EngineConfigError, shown_value
from serving.engines.base import Kind as Kind

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_BARE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+:@-]{0,254}$")
# hf_overrides / json_model_override_args keys that make transformers import code or read
# another repository's config.
_CODE_KEYS = {"auto_map", "trust_remote_code", "_name_or_path", "name_or_path", "custom_pipelines"}


def is_repo_id(value: str) -> bool:
    return bool(_REPO_ID.match(value)) and ".." not in value


def path_or_refuse(field: str, value: str, *, what: str) -> str:
    """An absolute path (normalised, no `..`) or a bare file name; anything else that the
    engine would read as a relative path is an error."""
    if value.startswith("/"):
        parts = value.split("/")
        if ".." in parts:
            raise EngineConfigError(f"{field}: {what} must not contain '..'", field=field)
        return posixpath.normpath(value)
    if _BARE.match(value) and value not in (".", ".."):
        return value
    raise EngineConfigError(
        f"{field}: {what} must be an absolute path under the host's model folders (or a bare file name "
        f"inside the first one), not {shown_value(value)}",
        field=field,
    )


def path_concern(field: str, value: str, *, what: str) -> Concern:
    path = path_or_refuse(field, value, what=what)
    return Concern(field, "path", f"{field} reads {path} on the host", path=path)


def source_concern(field: str, value: str, *, what: str, model_field: bool = False) -> Concern | None:
    """A model-like value: a repository id (the main model's is ordinary; another one named
    by a draft model or override is a code concern) or a path."""
    if is_repo_id(value):
        if model_field:
            return None
        return Concern(field, "code", f"{field} loads {value}, another repository, on the host")
    return path_concern(field, value, what=what)


def override_concerns(field: str, value: Mapping[str, Any]) -> list[Concern]:
    """hf_overrides-like dicts: code keys, or any string that names a repository or a path."""
    found: list[Concern] = []

    def walk(item: Any, where: str) -> None:
        if isinstance(item, Mapping):
            for key, sub in item.items():
                if key in _CODE_KEYS:
                    found.append(Concern(field, "code", f"{field} sets {key}, which makes the engine load code"))
                walk(sub, f"{where}.{key}")
        elif isinstance(item, list | tuple):
            for sub in item:
                walk(sub, where)
        elif isinstance(item, str) and (is_repo_id(item) or item.startswith(("/", "~", "."))):
            found.append(Concern(field, "code", f"{field} points at {item!r} ({where}), another repository or path"))

    walk(value, field)
    return found[:1]


def model_concern(config: EngineConfig, *, file_only: bool = False) -> Concern | None:
    """The model itself: a repository id or tag is ordinary; a path must lie under the
    model folders. `file_only` engines (llama.cpp) always read a file."""
    model = config.model
    if not file_only and (is_repo_id(model) or (_BARE.match(model) and not model.lower().endswith(".gguf"))):
        return None
    return path_concern("model", model, what="the model")


def check_paths_under(concerns: Iterable[Concern], roots: Iterable[str], *, host: str) -> None:
    """The panel's check: every absolute path lies under one of `roots` (text only; the host
    resolves symlinks before starting). Raises EngineConfigError naming the field."""
    clean_roots = [posixpath.normpath(r) for r in roots if r and r.startswith("/")]
    for concern in concerns:
        if concern.kind != "path" or not concern.path.startswith("/"):
            continue  # a bare file name is read inside the host's first model folder
        if not clean_roots:
            raise _no_roots(concern, host)
        if not any(concern.path == r or concern.path.startswith(r.rstrip("/") + "/") for r in clean_roots):
            raise EngineConfigError(
                f"{concern.field}: {concern.path} is outside {host}'s model folders ({', '.join(clean_roots)})",
                field=concern.field,
            )


def _no_roots(concern: Concern, host: str) -> EngineConfigError:
    return EngineConfigError(
        f"{concern.field}: {host} has no model folders yet, so it may not read {concern.path}; its agent "
        "reports them (CONTROLPANEL_MODEL_DIRS)",
        field=concern.field,
    )
