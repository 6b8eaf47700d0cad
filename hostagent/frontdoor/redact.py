"""What a client may read of a host's own words: a load's error names files on the host (the
weights, the engine's executable, its log), which tell a client how the host is laid out. Each
absolute path is cut to its last part (`/srv/models/qwen/q4.gguf` -> `q4.gguf`), so the reason
still says which file; the operator's log keeps the whole path."""

from __future__ import annotations

import re

__all__ = ["without_paths"]

_PART = r"[^\s/'\"`()\[\]{},;<>]"
# An absolute path (or ~/...) that starts a word: not a URL's `//host/path`, not `and/or`, not `1/2`.
_PATH = re.compile(rf"(?<![\w/:.~-])~?/(?:{_PART}+/)*({_PART}+)/?")


def without_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part."""
    return _PATH.sub(lambda match: match.group(1), text)
