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

import logging
import threading
import time
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict, Unpack

import httpx

from serving.host_events import HostEventReport
from serving.wire import Order, RevisionLaunch

from .outbox import Outbox

logger = logging.getLogger("controlpanel.agent")
API = "/agent/v1/"


class PanelError(RuntimeError):
    """The panel refused a report (4xx): retrying the same thing would not help."""


class CredentialRefused(PanelError):
    """401: this host's token is unknown or revoked."""


class PanelAway(RuntimeError):
    """No answer from the panel (connection refused, timeout, 5xx) after retrying."""


class FinishBody(TypedDict):
    """How an operation ended, as the agent reports it (PanelPort.finish; hostagent.operations'
    runner sends its handler's Outcome)."""

    state: str
    result: NotRequired[dict[str, Any] | None]
    error: NotRequired[str]
    benchmark: NotRequired[dict[str, Any] | None]
    install: NotRequired[dict[str, Any] | None]


class PanelPort(Protocol):
    def hello(self) -> dict[str, Any]: ...

    def register(
        self, *, facts: dict[str, Any], inventory: dict[str, Any], engine_state: dict[str, Any]
    ) -> dict[str, Any]: ...

    def probe(self, *, facts: dict[str, Any], inventory: dict[str, Any]) -> dict[str, Any]: ...

    def heartbeat(self, *, engine_state: dict[str, Any], engine_metrics: dict[str, Any] | None = None) -> None: ...

    def telemetry(
        self,
        *,
        gpu_samples: list[dict[str, Any]],
        engine_samples: list[dict[str, Any]] = ...,
        host_samples: list[dict[str, Any]] = ...,
        memory: dict[str, Any] | None = ...,
    ) -> None: ...

    def event(self, *, kind: str, message: str) -> None: ...

    def host_event(self, report: HostEventReport) -> None: ...

    def engine_log(self, *, run: dict[str, Any], offset: int, end: int, lines: list[str]) -> dict[str, Any] | None: ...

    def launch(self, revision_id: str) -> RevisionLaunch | None: ...

    def begin(self, op_id: str, *, worker: str) -> Order | None: ...

    def progress(
        self, op_id: str, *, stage: str | None = None, progress: float | None = None, log: str | None = None
    ) -> bool: ...

    def finish(self, op_id: str, **outcome: Unpack[FinishBody]) -> None: ...

    def flush(self) -> int: ...

    def serving(self, version: str | None) -> dict[str, Any] | None: ...

    def serving_report(self, body: dict[str, Any]) -> None: ...


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
        self, method: str, path: str, body: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None
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

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, patience: float = 0.0
    ) -> dict[str, Any] | None:
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

    def _durable(self, path: str, body: dict[str, Any], *, kind: str, patience: float) -> None:
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

        def send(path: str, body: dict[str, Any]) -> bool:
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
    def hello(self) -> dict[str, Any]:
        """{"host", "queue"}: which host this token is. Waits for a panel that is not up yet."""
        return self._call("GET", "hello", patience=600.0) or {}

    def register(
        self, *, facts: dict[str, Any], inventory: dict[str, Any], engine_state: dict[str, Any]
    ) -> dict[str, Any]:
        body = {"facts": facts, "inventory": inventory, "engine_state": engine_state}
        return self._call("POST", "register", body, patience=600.0) or {}

    def probe(self, *, facts: dict[str, Any], inventory: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "probe", {"facts": facts, "inventory": inventory}, patience=60.0) or {}

    def heartbeat(self, *, engine_state: dict[str, Any], engine_metrics: dict[str, Any] | None = None) -> None:
        """Liveness is now or never; the engine's metrics are telemetry and wait if need be."""
        try:
            self._call("POST", "heartbeat", {"engine_state": engine_state, "engine_metrics": engine_metrics})
        except PanelAway:
            if engine_metrics:
                self.outbox.put(
                    "telemetry", {"engine_samples": [{"ts": time.time(), **engine_metrics}]}, kind="telemetry"
                )
            raise

    def telemetry(
        self,
        *,
        gpu_samples: list[dict[str, Any]],
        engine_samples: list[dict[str, Any]] | None = None,
        host_samples: list[dict[str, Any]] | None = None,
        memory: dict[str, Any] | None = None,
    ) -> None:
        body: dict[str, Any] = {
            "gpu_samples": gpu_samples,
            "engine_samples": engine_samples or [],
            "host_samples": host_samples or [],
        }
        if memory is not None:  # hostagent.held.memory_report
            body["memory"] = memory
        self._durable("telemetry", body, kind="telemetry", patience=0.0)

    def event(self, *, kind: str, message: str) -> None:
        self._durable("events", {"kind": kind, "message": message}, kind="event", patience=5.0)

    def host_event(self, report: HostEventReport) -> None:
        """What happened to this host unasked (its agent killed, its door down or back): kept in
        the outbox while the panel is away, like a watchdog's event."""
        self._durable("events", report.to_dict(), kind="event", patience=5.0)

    def engine_log(self, *, run: dict[str, Any], offset: int, end: int, lines: list[str]) -> dict[str, Any] | None:
        """Lines of the engine's log (bytes offset..end of the host's file, one run); the answer's
        `received` is the byte the panel has up to. Not kept when the panel is away: the file is."""
        return self._call("POST", "engine-log", {"run": run, "offset": offset, "end": end, "lines": lines})

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
        body: dict[str, Any] = {"stage": stage, "progress": progress, "log": "\n".join(lines) or None}
        try:
            answer = self._call("POST", f"operations/{op_id}/progress", body, patience=2.0)
        except (PanelAway, PanelError) as exc:
            logger.warning("progress of %s not reported: %s", op_id, exc)
            if lines:
                with self._lock:
                    self._pending_log[op_id] = lines + self._pending_log.get(op_id, [])
            return False
        return bool(answer and answer.get("cancelled"))

    def finish(self, op_id: str, **outcome: Unpack[FinishBody]) -> None:
        with self._lock:
            lines = self._pending_log.pop(op_id, [])
        result = outcome.get("result") or {}
        if lines:
            result = {**result, "log_kept_while_away": "\n".join(lines)[-20000:]}
        body: dict[str, Any] = {"state": outcome["state"], "result": result, "error": outcome.get("error", "")}
        body |= {k: outcome[k] for k in ("benchmark", "install") if outcome.get(k) is not None}
        self._durable(f"operations/{op_id}/finish", body, kind="finish", patience=self.report_patience)

    def serving(self, version: str | None) -> dict[str, Any] | None:
        """The host's serving set (the front door's models, keys and limits), or None when it is
        still `version` (304). Raises PanelAway or PanelError: the door keeps what it has."""
        headers = {"If-None-Match": version} if version else None
        response = self._request("GET", "serving", headers=headers)
        if response.status_code == 304:
            return None
        if response.status_code >= 400:
            raise PanelError(f"GET serving: {response.status_code} {response.text[:500]}")
        data = response.json()
        if not isinstance(data, dict):
            raise PanelError("GET serving: the answer is not a JSON object")
        return data

    def serving_report(self, body: dict[str, Any]) -> None:
        """The front door's state and usage totals. Totals only grow, so a report sent twice is
        harmless; while the panel is away only the newest waits in the outbox."""
        self._durable("serving/report", body, kind="serving", patience=0.0)
