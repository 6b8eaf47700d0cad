"""The one port between this host's agent and the panel, and its HTTP implementation.

`PanelPort` is everything the agent may ask of or tell the panel; `HttpPanel` speaks it to
the panel's agent API (/agent/v1/, deployments.agent_api) with this host's bearer token.
The panel answers only for this host: another host's operation or revision is a 404.

When the panel is away (restarting, network), what must not be lost (an operation's end with
its results, telemetry, watchdog events) goes to an on-disk outbox and is sent again, in
order, once it answers; progress keeps its log lines for the next report; beginning an
operation waits for the panel.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import httpx

from serving.agent_reports import (
    DoorReport,
    EngineLogChunk,
    Heartbeat,
    Hello,
    HostProbe,
    OperationEnd,
    OperationProgress,
    ProbeAnswer,
    Registered,
    Registration,
    Telemetry,
    WatchdogEvent,
)
from serving.wire import Order, RevisionLaunch

from .outbox import Outbox

logger = logging.getLogger("controlpanel.agent")
API = "/agent/v1/"
# A body on the wire, as JSON: the port's callers hand it typed values (serving.agent_reports) and
# read typed answers; only the transport and the outbox see the JSON.
JsonBody = Mapping[str, object]


class PanelError(RuntimeError):
    """The panel refused a report (4xx): retrying the same thing would not help."""


class CredentialRefused(PanelError):
    """401: this host's token is unknown or revoked."""


class PanelAway(RuntimeError):
    """No answer from the panel (connection refused, timeout, 5xx) after retrying."""


class PanelPort(Protocol):
    def hello(self) -> Hello: ...

    def register(self, report: Registration) -> Registered: ...

    def probe(self, report: HostProbe) -> ProbeAnswer: ...

    def heartbeat(self, beat: Heartbeat) -> None: ...

    def telemetry(self, report: Telemetry) -> None: ...

    def event(self, event: WatchdogEvent) -> None: ...

    def engine_log(self, chunk: EngineLogChunk) -> int | None: ...

    def launch(self, revision_id: str) -> RevisionLaunch | None: ...

    def begin(self, op_id: str, *, worker: str) -> Order | None: ...

    def progress(
        self, op_id: str, *, stage: str | None = None, progress: float | None = None, log: str | None = None
    ) -> bool: ...

    def finish(self, op_id: str, end: OperationEnd) -> None: ...

    def flush(self) -> int: ...

    def serving(self, version: str | None) -> object | None: ...

    def serving_report(self, report: DoorReport) -> None: ...


class HttpPanel:
    """PanelPort over HTTP(S) with the host's bearer token."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        outbox_dir: str | Path,
        timeout: float = 10.0,
        verify: str | bool = True,
        transport: httpx.BaseTransport | None = None,
        report_patience: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.report_patience = report_patience
        self.client = httpx.Client(
            base_url=self.url + API,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "controlpanel-agent"},
            timeout=httpx.Timeout(timeout, connect=5.0),
            verify=verify,
            transport=transport,
            follow_redirects=False,
        )
        self.outbox = Outbox(outbox_dir)
        self._pending_log: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    # transport -------------------------------------------------------------------
    def _request(
        self, method: str, path: str, body: JsonBody | None = None, *, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        try:
            response = self.client.request(method, path, json=body if method == "POST" else None, headers=headers)
        except httpx.HTTPError as exc:
            raise PanelAway(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 500 or response.status_code in (502, 503, 504):
            raise PanelAway(f"{method} {path}: the panel answered {response.status_code}")
        if response.status_code == 401:
            raise CredentialRefused(
                "the panel refused this host's token (unknown or revoked): ask an admin for a new one"
            )
        return response

    def _call(self, method: str, path: str, body: JsonBody | None = None, *, patience: float = 0.0) -> JsonBody | None:
        """The JSON answer, None for 404 (not this host's). Retries a panel that is away for
        up to `patience` seconds, then raises PanelAway; raises PanelError on other 4xx."""
        deadline = time.monotonic() + patience
        delay = 0.5
        while True:
            try:
                response = self._request(method, path, body)
            except PanelAway:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            if response.status_code == 404:
                return None
            if response.status_code >= 400:
                raise PanelError(f"{method} {path}: {response.status_code} {response.text[:500]}")
            if not response.content:  # 204: taken, nothing to say
                return {}
            data = response.json()
            return data if isinstance(data, dict) else {}

    def _durable(self, path: str, body: JsonBody, *, kind: str, patience: float) -> None:
        """POST now, or keep it in the outbox until the panel is back (after what waits there)."""
        if len(self.outbox) == 0:
            try:
                self._call("POST", path, body, patience=patience)
                return
            except PanelAway as exc:
                logger.warning("panel away (%s): keeping the %s report until it is back", exc, kind)
            except CredentialRefused as exc:  # kept: an agent restarted with a new token sends it
                logger.error("%s: keeping the %s report", exc, kind)
            except PanelError as exc:
                logger.error("the panel refused a %s report: %s", kind, exc)
                return
        self.outbox.put(path, body, kind=kind)

    def flush(self) -> int:
        """Send what the outbox holds; stops at the first report the panel does not take yet."""

        def send(path: str, body: JsonBody) -> bool:
            try:
                self._call("POST", path, body)
            except PanelAway:
                return False
            except CredentialRefused:
                return False
            except PanelError as exc:  # refused for good: keeping it would block the rest
                logger.error("the panel refused a kept report %s: %s", path, exc)
            return True

        return self.outbox.drain(send)

    # the port --------------------------------------------------------------------
    def hello(self) -> Hello:
        """Which host this token is, and its queue. Waits for a panel that is not up yet."""
        return Hello.from_dict(self._call("GET", "hello", patience=600.0) or {})

    def register(self, report: Registration) -> Registered:
        return Registered.from_dict(self._call("POST", "register", report.to_dict(), patience=600.0) or {})

    def probe(self, report: HostProbe) -> ProbeAnswer:
        return ProbeAnswer.from_dict(self._call("POST", "probe", report.to_dict(), patience=60.0) or {})

    def heartbeat(self, beat: Heartbeat) -> None:
        """Liveness is now or never; the engine's metrics are telemetry and wait if need be."""
        try:
            self._call("POST", "heartbeat", beat.to_dict())
        except PanelAway:
            if beat.engine_metrics:
                kept = Telemetry(engine_samples=({"ts": time.time(), **beat.engine_metrics},))
                self.outbox.put("telemetry", kept.to_dict(), kind="telemetry")
            raise

    def telemetry(self, report: Telemetry) -> None:
        self._durable("telemetry", report.to_dict(), kind="telemetry", patience=0.0)

    def event(self, event: WatchdogEvent) -> None:
        self._durable("events", event.to_dict(), kind="event", patience=5.0)

    def engine_log(self, chunk: EngineLogChunk) -> int | None:
        """Send lines of the engine's log (bytes offset..end of the host's file, one run); answers
        the byte the panel has up to (None: it did not say). Not kept when the panel is away: the
        file is."""
        answer = self._call("POST", "engine-log", chunk.to_dict())
        received = (answer or {}).get("received")
        return received if isinstance(received, int) and not isinstance(received, bool) else None

    def launch(self, revision_id: str) -> RevisionLaunch | None:
        """The launch of one of this host's revisions; None when it is not this host's. Raises
        WireError (naming the field) for an answer that breaks the protocol's shape."""
        answer = self._call("GET", f"revisions/{int(revision_id)}/launch", patience=5.0)
        return None if answer is None else RevisionLaunch.from_dict(answer)

    def begin(self, op_id: str, *, worker: str) -> Order | None:
        """The operation's order once it is marked running; None when it is not this host's or
        not queued any more. Waits for a panel that is away (up to 10 minutes). Raises WireError
        (naming the field) for an order that breaks the protocol's shape: the operation is begun,
        and its runner ends it failed with that reason."""
        answer = self._call("POST", f"operations/{op_id}/begin", {"worker": worker}, patience=600.0)
        if not answer or not answer.get("begun"):
            return None
        return Order.from_dict(answer.get("order"))

    def progress(
        self, op_id: str, *, stage: str | None = None, progress: float | None = None, log: str | None = None
    ) -> bool:
        """Report progress; answers whether a cancel was asked for (False while the panel is
        away: the log lines are kept for the next report that gets through)."""
        with self._lock:
            lines = self._pending_log.pop(op_id, [])
            if log:
                lines.append(log)
        report = OperationProgress(stage=stage, progress=progress, log="\n".join(lines) or None)
        try:
            answer = self._call("POST", f"operations/{op_id}/progress", report.to_dict(), patience=2.0)
        except (PanelAway, PanelError) as exc:
            logger.warning("progress of %s not reported: %s", op_id, exc)
            if lines:
                with self._lock:
                    self._pending_log[op_id] = lines + self._pending_log.get(op_id, [])
            return False
        return bool(answer and answer.get("cancelled"))

    def finish(self, op_id: str, end: OperationEnd) -> None:
        """Report how the operation ended, with the progress log lines the panel did not take yet."""
        with self._lock:
            lines = self._pending_log.pop(op_id, [])
        if lines:
            end = dataclasses.replace(end, result={**end.result, "log_kept_while_away": "\n".join(lines)[-20000:]})
        self._durable(f"operations/{op_id}/finish", end.to_dict(), kind="finish", patience=self.report_patience)

    def serving(self, version: str | None) -> object | None:
        """The host's serving set as JSON (hostagent.door reads it, serving.wire.DoorDocument), or
        None when it is still `version` (304). Raises PanelAway or PanelError: the door keeps what it has."""
        headers = {"If-None-Match": version} if version else None
        response = self._request("GET", "serving", headers=headers)
        if response.status_code == 304:
            return None
        if response.status_code >= 400:
            raise PanelError(f"GET serving: {response.status_code} {response.text[:500]}")
        data: object = response.json()
        if not isinstance(data, dict):
            raise PanelError("GET serving: the answer is not a JSON object")
        return data

    def serving_report(self, report: DoorReport) -> None:
        """The front door's state and usage totals. Totals only grow, so a report sent twice is
        harmless; while the panel is away only the newest waits in the outbox."""
        self._durable("serving/report", report.to_dict(), kind="serving", patience=0.0)
