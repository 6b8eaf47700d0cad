"""What a file name from a model hub may be, on every side (pure: no Django, no I/O).

A hub lists a repository's files by name, and a mirror (HF_ENDPOINT) can list anything. The
panel stores the names an import keeps, and a GPU host joins them onto its model folder to write
the files; so a name is a relative POSIX path inside the repository, or it is refused:
not empty, not absolute, no backslash, no `.`, `..` or empty segment, no control or invisible
formatting character (a newline would forge log and marker lines), at most MAX_HUB_PATH
characters. The import checks it before anything is stored, the host again before it writes.
"""

from __future__ import annotations

import unicodedata

MAX_HUB_PATH = 300  # the hub's own deepest real names are far shorter


def hub_path_problem(name: object) -> str | None:
    """Why `name` is not a relative path inside a repository, or None when it is one."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    if len(name) > MAX_HUB_PATH:
        return f"it is longer than {MAX_HUB_PATH} characters"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in name):
        return "it holds a control character"
    if "\\" in name:
        return "it holds a backslash"
    if name.startswith("/"):
        return "it is an absolute path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "it is not a plain relative path (an empty, '.' or '..' part)"
    return None
