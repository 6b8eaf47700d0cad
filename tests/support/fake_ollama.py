"""A stand-in for an Ollama server's pull API, for tests: no Ollama server can be installed here
(it is neither a PyPI nor a Debian package; PyPI's `ollama` is only the client), so this answers
`POST /api/pull` as Ollama's API documentation (docs/api.md, "Pull a Model") describes it: one JSON
object per line, `{"status": "pulling manifest"}`, then per layer `{"status": "pulling <digest>",
"digest", "total", "completed"}` as bytes arrive, `verifying sha256 digest`, `writing manifest`,
`success`; an unknown model is one `{"error": "pull model manifest: file does not exist"}` line."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOllama:
    def __init__(self, models: dict[str, list[int]]) -> None:
        self.models = models  # tag -> layer sizes
        self.pulls: list[dict[str, Any]] = []
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeOllama:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                return

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                fake.pulls.append(body)
                if self.path != "/api/pull":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                layers = fake.models.get(str(body.get("model") or body.get("name")))
                lines: list[dict[str, Any]] = [{"status": "pulling manifest"}]
                if layers is None:
                    lines.append({"error": "pull model manifest: file does not exist"})
                else:
                    for i, total in enumerate(layers):
                        digest = "sha256:" + hashlib.sha256(f"{body.get('model')}-{i}".encode()).hexdigest()
                        for done in (0, total // 2, total):
                            status = f"pulling {digest[7:19]}"
                            lines.append({"status": status, "digest": digest, "total": total, "completed": done})
                    lines += [{"status": "verifying sha256 digest"}, {"status": "writing manifest"}]
                    lines.append({"status": "success"})
                for line in lines:
                    data = json.dumps(line).encode() + b"\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                    time.sleep(0.01)
                self.wfile.write(b"0\r\n\r\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True, name="fake-ollama").start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
