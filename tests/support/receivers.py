"""Real local endpoints for notification tests: an HTTP webhook receiver, a receiver that
accepts connections and never answers, and an SMTP server (aiosmtpd), each on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class WebhookReceiver:
    """Takes POSTs, keeps (path, headers, JSON body), answers 200 (or `status`, which a test
    may change while it runs; with `location`, a redirect there). Listens on `host` (any of
    127.0.0.0/8 on Linux)."""

    def __init__(self, status: int = 200, *, host: str = "127.0.0.1", location: str = "") -> None:
        self.status = status
        self.location = location
        self.received: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.received.append(
                    {"path": self.path, "headers": dict(self.headers), "json": json.loads(raw or b"null")}
                )
                self.send_response(receiver.status)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def __enter__(self) -> WebhookReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class SilentReceiver:
    """Accepts TCP connections and never answers: a channel that times out."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(conn)  # held open, never read or answered

    def __enter__(self) -> SilentReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(2)
        for conn in self.accepted:
            conn.close()
        self.sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SmtpServer:
    """A real SMTP server (aiosmtpd) that keeps every message it is handed."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[Any] = []
        server = self

        class Handler:
            async def handle_DATA(self, smtp: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
                server.messages.append(envelope)
                return "250 Message accepted for delivery"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> SmtpServer:
        self.controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()
