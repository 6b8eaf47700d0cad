"""Sending through Apprise (one library for Slack, Discord, Matrix, ntfy, e-mail, webhooks).

A channel URL holds credentials, so nothing that leaves this module carries it: Apprise's
log lines are captured (not passed on to the worker's log) and the error that is kept goes
through the panel's one masker (core.secrets_mask) with the URL, so its secret parts are masked
wherever Apprise or the HTTP library repeat them.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import apprise
from apprise.logger import LOGGER_NAME
from django.conf import settings

from core.secrets_mask import mask_text

from .addresses import AddressRefused, IPNetwork, guarded, networks_parse, resolve_checked

server_log = logging.getLogger(__name__)

# Services that post to a chat, a push service, a mailbox or an HTTP endpoint. Apprise's
# desktop and system notifiers (windows://, dbus://, macosx://, syslog://) would act on the
# panel's own machine and are left out.
SCHEMES: dict[str, str] = {
    "json": "JSON webhook",
    "jsons": "JSON webhook (HTTPS)",
    "form": "form webhook",
    "forms": "form webhook (HTTPS)",
    "slack": "Slack",
    "discord": "Discord",
    "matrix": "Matrix",
    "matrixs": "Matrix (HTTPS)",
    "ntfy": "ntfy",
    "ntfys": "ntfy (HTTPS)",
    "mailto": "e-mail",
    "mailtos": "e-mail (TLS)",
    "msteams": "Microsoft Teams",
    "tgram": "Telegram",
    "gotify": "Gotify",
    "gotifys": "Gotify (HTTPS)",
    "mmost": "Mattermost",
    "mmosts": "Mattermost (HTTPS)",
    "pover": "Pushover",
}
MAX_URL = 2000
MAX_ERROR = 1000
# Services that send only to their own public host, whatever the URL says (its "host" is a token
# or a team name): no address of the user's choosing to check. Every other scheme sends to the
# host in its URL (e-mail: to its SMTP host), which must be public or in an allowed network.
FIXED_HOST = frozenset({"slack", "discord", "msteams", "tgram", "pover"})
# What a send that failed on the way (refused, timed out, unreachable, reset, not speaking HTTP,
# an SMTP dialogue that broke off) stores and shows, whatever the port's state: the difference
# would let whoever reads it map the network. The panel's log has the details.
UNREACHABLE = (
    "Not delivered: the channel's server could not be reached or did not take the message "
    "(the panel's log has the details)."
)


class ChannelUrlError(ValueError):
    """A URL Apprise cannot use, or of a scheme the panel does not send to. The message never
    repeats the URL."""


@dataclass(frozen=True)
class ChannelInfo:
    scheme: str
    service: str


@dataclass(frozen=True)
class SendResult:
    delivered: bool
    error: str
    seconds: float


class _ThreadRecords(logging.Handler):
    """Keeps the records this thread emits (other threads' sends are theirs)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.thread = threading.get_ident()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.records.append(record)


_capturing = 0
_capture_lock = threading.Lock()
_saved: tuple[int, bool] = (logging.NOTSET, True)


@contextlib.contextmanager
def _apprise_log() -> Iterator[_ThreadRecords]:
    """Apprise's own log while it works, kept here and off the process's handlers (its debug
    lines name URLs and payloads). Threads of one worker may send at once: the first to start
    turns Apprise's logger to DEBUG and off the process's handlers, the last to end restores it."""
    global _capturing, _saved
    logger = logging.getLogger(LOGGER_NAME)
    handler = _ThreadRecords()
    with _capture_lock:
        if _capturing == 0:
            _saved = (logger.level, logger.propagate)
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
        _capturing += 1
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        with _capture_lock:
            logger.removeHandler(handler)
            _capturing -= 1
            if _capturing == 0:
                logger.setLevel(_saved[0])
                logger.propagate = _saved[1]


def _scheme(url: str) -> str:
    match = re.match(r"^([a-z][a-z0-9+.-]*)://", url.strip(), re.IGNORECASE)
    return match.group(1).lower() if match else ""


def plugin_secrets(plugin: object | None) -> list[str]:
    """What Apprise read from a channel's URL that is a secret though no shape says so: an ntfy
    channel's topics (whoever knows a topic reads and posts to it; it is the channel's only secret,
    in the path, in `?to=`, or where the host stands in ntfy.sh's form `ntfy://topic`), as written
    and as a URL writes them."""
    topics = getattr(plugin, "topics", None) if type(plugin).__name__ == "NotifyNtfy" else None
    found = [str(t) for t in topics or () if str(t).strip()]
    return list(dict.fromkeys(found + [quote(t, safe="") for t in found]))


def _clean(lines: list[str], url: str, plugin: object | None = None) -> str:
    text = " / ".join(dict.fromkeys(line.strip() for line in lines if line.strip()))
    return mask_text(text, secrets=plugin_secrets(plugin), urls=[url])[:MAX_ERROR]


def _plugin(url: str) -> tuple[object | None, list[logging.LogRecord]]:
    with _apprise_log() as log:
        plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    return plugin, log.records


def allowed_networks() -> list[IPNetwork]:
    """The internal networks channels may send to (NOTIFICATIONS_ALLOWED_NETWORKS)."""
    return networks_parse(getattr(settings, "NOTIFICATIONS_ALLOWED_NETWORKS", []))


def destination_hosts(scheme: str, plugin: object) -> list[str]:
    """The hosts of the user's choosing that `plugin` (Apprise's own reading of the URL) will
    connect to: the URL's host, an e-mail's SMTP host; none for a service's fixed public host
    (ntfy's and Matrix's hosted modes included)."""
    if scheme in FIXED_HOST:
        return []
    mode = str(getattr(plugin, "mode", "") or "")
    if (scheme.startswith("ntfy") and mode == "cloud") or (scheme.startswith("matrix") and mode == "t2bot"):
        return []
    host = getattr(plugin, "smtp_host", None) or getattr(plugin, "host", None)
    return [str(host)] if host else []


def _destinations_check(scheme: str, plugin: object) -> None:
    """AddressRefused when a host the plugin sends to resolves to an address not allowed now. A name
    that does not resolve is let through: nothing can be sent to it, and each send checks again."""
    allowed = allowed_networks()
    for host in destination_hosts(scheme, plugin):
        try:
            resolve_checked(host, None, allowed)
        except AddressRefused:
            raise
        except (OSError, UnicodeError, ValueError):
            continue


def channel_check(url: str) -> ChannelInfo:
    """What the URL sends to; ChannelUrlError (never repeating the URL) when it cannot be used,
    including when its host resolves to an address channels may not send to (see addresses)."""
    url = url.strip()
    if not url:
        raise ChannelUrlError("A channel needs an Apprise URL.")
    if len(url) > MAX_URL or any(c in url for c in "\x00\r\n"):
        raise ChannelUrlError(f"A channel URL is one line of at most {MAX_URL} characters.")
    scheme = _scheme(url)
    if scheme not in SCHEMES:
        known = ", ".join(f"{s}://" for s in SCHEMES)
        raise ChannelUrlError(f"The panel sends to these kinds of URL only: {known}.")
    plugin, records = _plugin(url)
    if plugin is None:
        why = _clean([r.getMessage() for r in records if r.levelno >= logging.WARNING], url, plugin)
        raise ChannelUrlError(f"Apprise cannot use this {scheme}:// URL" + (f": {why}" if why else "."))
    try:
        _destinations_check(scheme, plugin)
    except AddressRefused as exc:
        raise ChannelUrlError(str(exc)) from None
    return ChannelInfo(scheme=scheme, service=str(getattr(plugin, "service_name", "") or SCHEMES[scheme]))


def channel_send(url: str, *, title: str, body: str, notify_type: str = "info") -> SendResult:
    """Send one message, in this thread. The URL is checked again first (its host may resolve
    elsewhere since it was saved) and every connection the send makes is held to the allowed
    addresses as it is made (addresses.guarded). The error kept is Apprise's account when the
    channel answered (an HTTP status), masked; one sentence for any failure on the way
    (UNREACHABLE), with the details, masked, in the panel's log. `notify_type` is Apprise's
    (info, success, warning, failure: choices.severity of the event)."""
    started = time.monotonic()
    try:
        scheme = channel_check(url).scheme
    except ChannelUrlError as exc:
        return SendResult(False, str(exc), time.monotonic() - started)
    with _apprise_log() as log, guarded(allowed_networks()) as guard:
        plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
        try:
            delivered = bool(plugin is not None and plugin.notify(body=body, title=title, notify_type=notify_type))
        except Exception as exc:  # a plugin's own bug must not look like a delivery
            log.records.append(logging.makeLogRecord({"msg": f"{type(exc).__name__}: {exc}", "levelno": 40}))
            delivered = False
    seconds = time.monotonic() - started
    if delivered:
        return SendResult(True, "", seconds)
    # The warnings say what failed; the debug lines about exceptions say why (timeouts, refusals).
    lines = [
        r.getMessage()
        for r in log.records
        if r.levelno >= logging.WARNING or "exception" in r.getMessage().lower() or "error" in r.getMessage().lower()
    ]
    lines = [line for line in lines if not line.startswith(("JSON Payload", "Response Details"))]
    account = _clean(lines, url, plugin) or "Apprise reported a failure without saying why."
    if guard.refused:
        return SendResult(False, guard.refused, seconds)
    if not guard.answered:
        server_log.warning("a %s:// notification failed on the way: %s", scheme, account)
        return SendResult(False, UNREACHABLE, seconds)
    return SendResult(False, account, seconds)
