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
from pathlib import Path

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


class PathOutsideModelFolders(HostRuntimeError):
    """A path the engine would open lies outside the host's model folders."""


def working_folder(model_dirs: Sequence[str]) -> str | None:
    """Where a bare file name is read: the first model folder that exists."""
    return next((d for d in model_dirs if os.path.isdir(d)), None)


def confine(paths: Iterable[tuple[str, str]], model_dirs: Sequence[str], *, cwd: str | None) -> None:
    """Raise PathOutsideModelFolders unless every (field, path) resolves inside a model folder.

    A relative path is read from `cwd` (the engine's working directory)."""
    roots = [Path(os.path.realpath(d)) for d in model_dirs if d and os.path.isabs(d)]
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
        real = Path(os.path.realpath(path))
        if not any(real == root or root in real.parents for root in roots):
            shown = f"{path} (which resolves to {real})" if str(real) != os.path.normpath(path) else path
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
    roots = [Path(os.path.realpath(d)) for d in install_dirs if d and os.path.isabs(d)]
    if not roots:
        raise PathOutsideInstallFolders(
            f"{field}: this host allows installs from no folder ({INSTALL_DIRS_SETTING} is not set), so it will not "
            f"install from {path}"
        )
    if not os.path.isabs(path):
        raise PathOutsideInstallFolders(f"{field}: {path} is not an absolute path")
    real = Path(os.path.realpath(path))
    if not any(real == root or root in real.parents for root in roots):
        shown = f"{path} (which resolves to {real})" if str(real) != os.path.normpath(path) else path
        raise PathOutsideInstallFolders(
            f"{field}: {shown} is outside this host's install folders ({', '.join(map(str, roots))}; "
            f"{INSTALL_DIRS_SETTING})"
        )
    if not real.is_dir():
        raise PathOutsideInstallFolders(f"{field}: {path} is not a folder on this host")
    return str(real)
