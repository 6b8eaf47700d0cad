"""Keep what an engine opens inside the host's model folders, and what an install reads
(a wheelhouse, a llama.cpp checkout) inside its install folders (runs on the host).

The panel checks a revision's paths as text when it is created; only the host can see
symlinks. Before an engine starts, every path it will open is resolved here (symlinks
followed, `..` collapsed) and must land inside one of the model folders this host's
agent was configured with (CONTROLPANEL_MODEL_DIRS), never the panel's word for them.
An install from a folder on the host runs that folder's code (a wheel, an sdist's setup,
a CMake build), so it is resolved the same way against CONTROLPANEL_INSTALL_DIRS, which
allows nothing unless the host's administrator lists folders.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from serving.engines.base import gguf_split_part
from serving.launch import working_folder as first_folder

from .errors import HostRuntimeError

INSTALL_DIRS_SETTING = "CONTROLPANEL_INSTALL_DIRS"


def _dirs_setting(environ: Mapping[str, str], name: str) -> list[str] | None:
    """A folder list setting (colon- or comma-separated absolute paths); None when unset."""
    text = environ.get(name, "").strip()
    if not text:
        return None
    parts = [p.strip() for p in text.replace(",", ":").split(":") if p.strip()]
    relative = [p for p in parts if not os.path.isabs(p)]
    if relative:
        raise HostRuntimeError(f"{name} must hold absolute paths, not {', '.join(relative)}")
    return [os.path.normpath(p) for p in parts]


def model_dirs_from_env(environ: Mapping[str, str], *, data_dir: str) -> list[str]:
    """This host's model folders: CONTROLPANEL_MODEL_DIRS (colon- or comma-separated absolute
    paths), or by default the panel's data folder's `models`, ~/models and the Hugging Face cache."""
    dirs = _dirs_setting(environ, "CONTROLPANEL_MODEL_DIRS")
    if dirs is not None:
        return dirs
    home = Path.home()
    hf_home = environ.get("HF_HOME") or str(home / ".cache" / "huggingface")
    return [os.path.join(data_dir, "models"), str(home / "models"), os.path.normpath(hf_home)]


def install_dirs_from_env(environ: Mapping[str, str]) -> list[str]:
    """The folders an install may read a wheelhouse or a source checkout from:
    CONTROLPANEL_INSTALL_DIRS (parsed like CONTROLPANEL_MODEL_DIRS). None by default."""
    return _dirs_setting(environ, INSTALL_DIRS_SETTING) or []


def ensure_default_model_dir(environ: Mapping[str, str], *, data_dir: str) -> str | None:
    """Create the default model folder (the data folder's `models`) so a first GGUF has a place to go.

    Only when CONTROLPANEL_MODEL_DIRS is not set: folders an admin names are theirs to create.
    Returns the folder, or None when none was due or it could not be made (the host still registers)."""
    if environ.get("CONTROLPANEL_MODEL_DIRS", "").strip():
        return None
    folder = os.path.join(data_dir, "models")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return folder


class PathOutsideModelFolders(HostRuntimeError):
    """A path the engine would open lies outside the host's model folders."""


def working_folder(model_dirs: Sequence[str]) -> str | None:
    """Where a bare file name is read: the first model folder that exists (serving.launch's
    rule, which the exported start script and unit follow, checked on this host's disk)."""
    return first_folder(model_dirs, is_dir=os.path.isdir)


def _roots(folders: Sequence[str]) -> list[Path]:
    """The real paths of the absolute `folders` (symlinks followed)."""
    return [Path(os.path.realpath(d)) for d in folders if d and os.path.isabs(d)]


def _outside(path: str, roots: Sequence[Path]) -> tuple[Path, str | None]:
    """`path`'s real path, and how to name it when it lies in none of `roots` (None when it is in one)."""
    real = Path(os.path.realpath(path))
    if any(real == root or root in real.parents for root in roots):
        return real, None
    return real, f"{path} (which resolves to {real})" if str(real) != os.path.normpath(path) else path


def confine(paths: Iterable[tuple[str, str]], model_dirs: Sequence[str], *, cwd: str | None) -> None:
    """Raise PathOutsideModelFolders unless every (field, path) resolves inside a model folder.

    A relative path is read from `cwd` (the engine's working directory)."""
    roots = _roots(model_dirs)
    for field, path in paths:
        if not roots:
            raise PathOutsideModelFolders(
                f"{field}: this host has no model folders configured (CONTROLPANEL_MODEL_DIRS), so the engine may "
                f"not open {path}"
            )
        if not os.path.isabs(path):
            if cwd is None:
                raise PathOutsideModelFolders(f"{field}: {path} is a bare name and no model folder exists to hold it")
            path = os.path.join(cwd, path)
        _real, shown = _outside(path, roots)
        if shown is not None:
            raise PathOutsideModelFolders(
                f"{field}: {shown} is outside this host's model folders ({', '.join(map(str, roots))}); "
                "the engine was not started"
            )


class PathOutsideInstallFolders(HostRuntimeError):
    """A wheelhouse or source folder an install would read lies outside the host's install folders."""


def confine_install_folder(field: str, path: str, install_dirs: Sequence[str]) -> str:
    """The real path of `path` (symlinks followed, `..` collapsed) when it is an existing folder
    inside one of `install_dirs`; PathOutsideInstallFolders otherwise. The install then reads
    the real path, not the name it was given."""
    roots = _roots(install_dirs)
    if not roots:
        raise PathOutsideInstallFolders(
            f"{field}: this host allows installs from no folder ({INSTALL_DIRS_SETTING} is not set), so it will not "
            f"install from {path}"
        )
    if not os.path.isabs(path):
        raise PathOutsideInstallFolders(f"{field}: {path} is not an absolute path")
    real, shown = _outside(path, roots)
    if shown is not None:
        raise PathOutsideInstallFolders(
            f"{field}: {shown} is outside this host's install folders ({', '.join(map(str, roots))}; "
            f"{INSTALL_DIRS_SETTING})"
        )
    if not real.is_dir():
        raise PathOutsideInstallFolders(f"{field}: {path} is not a folder on this host")
    return str(real)


# --- files in the model folders (the GGUF import reads them by name) ---------------------------

MAX_LISTED = 200  # GGUF files a listing returns
MAX_VISITED = 5_000  # folder entries a listing looks at, all folders together (a big HF cache stays quick)
MAX_DEPTH = 6  # HF cache: hub/models--org--name/snapshots/<commit>/file.gguf


@dataclass(frozen=True)
class ModelFile:
    name: str  # what to type: the path relative to its model folder, or absolute when an earlier folder shadows it
    path: str  # absolute, as found (not resolved: the HF cache's snapshots are links into its blobs)
    folder: str
    size: int


def find_in_model_dirs(name: str, model_dirs: Sequence[str]) -> str:
    """The absolute path of `name` (a bare or relative file name) in the first model folder that holds it.

    Raises PathOutsideModelFolders when the name leads out of the folders (`..`, a symlink elsewhere)
    and FileNotFoundError when no folder holds it."""
    if not name or os.path.isabs(name) or "\x00" in name:
        raise PathOutsideModelFolders(f"{name!r} is not a file name inside the model folders")
    if ".." in Path(name).parts:
        raise PathOutsideModelFolders(f"{name} leads out of the model folders ('..' is not allowed)")
    for folder in model_dirs:
        if not os.path.isabs(folder) or not os.path.isdir(folder):
            continue
        candidate = os.path.normpath(os.path.join(folder, name))
        if not os.path.isfile(candidate):
            continue
        confine([("path", candidate)], model_dirs, cwd=None)  # a link in the folder may lead elsewhere
        return candidate
    raise FileNotFoundError(name)


def model_files(model_dirs: Sequence[str], *, suffix: str = ".gguf") -> list[ModelFile]:
    """Files ending in `suffix` under the model folders, first folder first, bounded (MAX_LISTED files,
    MAX_VISITED entries, MAX_DEPTH levels). Links to folders are not followed; links to files are,
    when they stay inside the folders. Of a split GGUF only the first shard is listed."""
    found: list[ModelFile] = []
    seen_names: set[str] = set()
    visited = 0
    for folder in model_dirs:
        if not os.path.isabs(folder) or not os.path.isdir(folder):
            continue
        stack: list[tuple[str, int]] = [(folder, 0)]
        while stack and visited < MAX_VISITED and len(found) < MAX_LISTED:
            current, depth = stack.pop()
            try:
                entries = sorted(os.scandir(current), key=lambda e: e.name, reverse=True)
            except OSError:
                continue
            for entry in entries:
                visited += 1
                if entry.name.startswith("."):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if depth + 1 < MAX_DEPTH:
                            stack.append((entry.path, depth + 1))
                        continue
                    if not entry.name.lower().endswith(suffix) or not entry.is_file(follow_symlinks=True):
                        continue
                    shard = gguf_split_part(entry.name)
                    if shard and not shard.first:
                        continue
                    confine([("path", entry.path)], model_dirs, cwd=None)
                    size = entry.stat(follow_symlinks=True).st_size
                except (OSError, PathOutsideModelFolders):
                    continue
                relative = os.path.relpath(entry.path, folder)
                name = relative if relative not in seen_names else entry.path
                seen_names.add(relative)
                found.append(ModelFile(name=name, path=entry.path, folder=folder, size=size))
    found.sort(key=lambda f: (model_dirs.index(f.folder), f.name))
    return found[:MAX_LISTED]
