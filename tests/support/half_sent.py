"""The attacker of tests/test_data_plane_limits.py, in a process of its own as a stranger's would be:

    python -m tests.support.half_sent PORT COUNT SOURCE WITHIN

opens COUNT connections to 127.0.0.1:PORT from the address SOURCE, each sending
`POST /v1/chat/completions HTTP/1.1`, a Host header and nothing more. It prints one JSON line once
all are open ({"opened", "seconds"}), then reads what the server writes on each until every one
is closed or WITHIN seconds pass, and prints one more: per connection, the status the server
answered (0: none), its error code, seconds from the flood's start to its connection ("at"), seconds
from connecting to the answer ("first", -1: none), and whether the server closed it.
"""

from __future__ import annotations

import json
import selectors
import socket
import sys
import time
from typing import Any

HALF_SENT = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"


def open_half_sent(port: int, count: int, source: str, within: float = 30.0) -> list[tuple[socket.socket, float]]:
    """All at once, as a flood comes: each connects without waiting for the others. Each with the
    time (monotonic) it was connected."""
    selector = selectors.DefaultSelector()
    opened: list[tuple[socket.socket, float]] = []
    for index in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((source, 0))
        sock.connect_ex(("127.0.0.1", port))
        selector.register(sock, selectors.EVENT_WRITE, index)
        opened.append((sock, 0.0))
    deadline, left = time.monotonic() + within, count
    while left and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.1):
            sock = opened[key.data][0]
            selector.unregister(sock)
            left -= 1
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                sock.send(HALF_SENT)
            opened[key.data] = (sock, time.monotonic())
    selector.close()
    assert not left, f"{left} connections were not made within {within} s"
    return opened


def read_answers(opened: list[tuple[socket.socket, float]], within: float, started: float) -> list[dict[str, Any]]:
    selector = selectors.DefaultSelector()
    got: list[dict[str, Any]] = [{"data": b"", "first": -1.0, "closed": False} for _ in opened]
    for index, (sock, _) in enumerate(opened):
        selector.register(sock, selectors.EVENT_READ, index)
    deadline, left = time.monotonic() + within, len(opened)
    while left and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.1):
            sock, connected = opened[key.data]
            entry = got[key.data]
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if data and entry["first"] < 0:
                entry["first"] = time.monotonic() - connected
            entry["data"] += data
            if not data:
                entry["closed"] = True
                selector.unregister(sock)
                left -= 1
    for sock, _ in opened:
        sock.close()
    return [{"status": status(e["data"]), "code": code(e["data"]), "at": connected - started, "first": e["first"],
             "closed": e["closed"]} for e, (_, connected) in zip(got, opened, strict=True)]  # fmt: skip


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def code(answer: bytes) -> str:
    body = answer.partition(b"\r\n\r\n")[2]
    return str(json.loads(body)["error"]["code"]) if body else ""


def main() -> None:
    port, count, source, within = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    started = time.monotonic()
    opened = open_half_sent(port, count, source)
    print(json.dumps({"opened": len(opened), "seconds": time.monotonic() - started}), flush=True)
    print(json.dumps(read_answers(opened, within, started)), flush=True)


if __name__ == "__main__":
    main()
