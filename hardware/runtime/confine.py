"""Keep what an engine opens inside the host's model folders (runs on the host).

The panel checks a revision's paths as text when it is created; only the host can see
symlinks. Before an engine starts, every path it will open is resolved here (symlinks
followed, `..` collapsed) and must land inside one of the model folders this host's
agent was configured with (CONTROLPANEL_MODEL_DIRS), never the panel's word for them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .errors import HostRuntimeError


def model_dirs_from_env(environ: Mapping[str, str], *, data_dir: str) -> list[str]:
    """This host's model folders: CONTROLPANEL_MODEL_DIRS (colon- or comma-separated absolute
    paths), or by default the panel's data folder's `models`, ~/models and the Hugging Face cache."""
    text = environ.get("CONTROLPANEL_MODEL_DIRS", "").strip()
    if text:
        parts = [p.strip() for p in text.replace(",", ":").split(":") if p.strip()]
        relative = [p for p in parts if not os.path.isabs(p)]
        if relative:
            raise HostRuntimeError(f"CONTROLPANEL_MODEL_DIRS must hold absolute paths, not {', '.join(relative)}")
        return [os.path.normpath(p) for p in parts]
    home = Path.home()
    hf_home = environ.get("HF_HOME") or str(home / ".cache" / "huggingface")
    return [os.path.join(data_dir, "models"), str(home / "models"), os.path.normpath(hf_home)]


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
