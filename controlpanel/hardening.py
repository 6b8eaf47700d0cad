"""Defaults of a deployed panel that settings.py applies: private data files, the client's
address behind a reverse proxy, the proxy's HTTPS header.

Kept free of Django imports at module level: settings.py calls these while it loads.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
# Every process of the panel (web, worker, beat, agent, manage.py) and what it starts (engines,
# installs) creates files readable by its own user only.
DEFAULT_UMASK = 0o077


def parse_umask(value: str) -> int | None:
    """`077` / `0o077` -> 0o077; empty or `keep` -> None (leave the inherited umask)."""
    text = value.strip().lower()
    if text in ("", "keep"):
        return None
    text = text.removeprefix("0o")
    try:
        mask = int(text, 8)
    except ValueError:
        raise ValueError(f"CONTROLPANEL_UMASK must be an octal number such as 077, not {value!r}") from None
    if not 0 <= mask <= 0o777:
        raise ValueError(f"CONTROLPANEL_UMASK must lie between 000 and 777, not {value!r}")
    return mask


def write_private(path: Path, text: str) -> None:
    """Create `path` with mode 0600 from the start (no window in which it is world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def secure_data_dir(data_dir: Path) -> None:
    """Make the data folder private: the folder 0700, and each file (0600) and folder (0700)
    directly in it. The folder's own mode already keeps other users out of everything below;
    `scripts/run` also tightens the whole tree once at start.

    A file this process does not own (a shared volume, a read-only mount) is left as it is:
    the panel must still start.
    """
    _tighten(data_dir, PRIVATE_DIR)
    try:
        entries = list(os.scandir(data_dir))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_symlink():
                continue
            mode = PRIVATE_DIR if entry.is_dir() else PRIVATE_FILE
        except OSError:
            continue
        _tighten(Path(entry.path), mode)


def _tighten(path: Path, mode: int) -> None:
    try:
        current = stat.S_IMODE(path.lstat().st_mode)
        # Only remove bits for group and others; keep the owner's own bits (e.g. an executable).
        wanted = current & ~0o077 if mode == PRIVATE_FILE else (current & ~0o077) | 0o700
        if current != wanted:
            path.chmod(wanted)
    except OSError:
        pass


def parse_proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """`X-Forwarded-Proto` or `X-Forwarded-Proto=https` -> ("HTTP_X_FORWARDED_PROTO", "https")."""
    text = value.strip()
    if not text:
        return None
    name, _, expected = text.partition("=")
    name, expected = name.strip(), expected.strip() or "https"
    if not name or any(c.isspace() for c in name):
        raise ValueError(
            f"DJANGO_SECURE_PROXY_SSL_HEADER must be a header name such as X-Forwarded-Proto, not {value!r}"
        )
    meta = name.upper().replace("-", "_")
    if not meta.startswith("HTTP_"):
        meta = "HTTP_" + meta
    return meta, expected


def client_ip(request: Any) -> str | None:
    """The client's address: REMOTE_ADDR, or with CONTROLPANEL_PROXY_COUNT = N trusted reverse
    proxies in front, the address the outermost of them saw (the N-th entry from the right of
    X-Forwarded-For). Entries further left are set by the client and are never trusted."""
    from django.conf import settings

    remote = request.META.get("REMOTE_ADDR") or None
    count = int(getattr(settings, "CONTROLPANEL_PROXY_COUNT", 0) or 0)
    if count <= 0:
        return remote
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    if len(forwarded) < count:
        return remote
    return _valid_ip(forwarded[-count]) or remote


def _valid_ip(text: str) -> str | None:
    import ipaddress

    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


USERNAME_MAX = 150  # django.contrib.auth's User.username


def login_username(request: Any, credentials: dict[str, Any] | None = None) -> str:
    """The user name a sign-in attempt is throttled under (django-axes AXES_USERNAME_CALLABLE).

    What the form sent, made storable: no NUL, at most as long as a real user name can be,
    so a 5,000-character name is one more failed attempt, not a database error."""
    raw = (credentials or {}).get("username")
    if raw is None and request is not None and hasattr(request, "POST"):
        raw = request.POST.get("username", "")
    text = str(raw or "").replace("\x00", "")
    return text[:USERNAME_MAX]
