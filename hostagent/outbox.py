"""Reports the panel could not take yet (it was away): one 0600 JSON file each, sent again in
order when it is back. What waits here are results, telemetry and events, never a secret."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from core.atomicfile import remove_stale_tmp, write_atomic

log = logging.getLogger("controlpanel.agent")
MAX_ENTRIES = 20_000  # telemetry beyond this is dropped oldest first; results are always kept


class Outbox:
    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self._lock = threading.Lock()
        self._seq = 0

    def put(self, path: str, body: Mapping[str, object], *, kind: str) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._lock:
            self._seq += 1
            name = f"{time.time_ns():020d}-{self._seq:06d}-{kind}.json"
        # Whole or absent: a kill or a full disk mid-write leaves no half entry to send.
        write_atomic(self.folder / name, json.dumps({"path": path, "body": body}))
        self._trim()

    def entries(self) -> list[Path]:
        return sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []

    def __len__(self) -> int:
        return len(self.entries())

    def _trim(self) -> None:
        entries = self.entries()
        telemetry = [p for p in entries if p.name.endswith("-telemetry.json")]
        # The front door's reports are running totals: the newest says all the older ones do.
        serving = [p for p in entries if p.name.endswith("-serving.json")]
        for path in telemetry[: max(0, len(telemetry) - MAX_ENTRIES)] + serving[:-1]:
            path.unlink(missing_ok=True)

    def drain(self, send: Callable[[str, Mapping[str, object]], bool]) -> int:
        """Send entries oldest first while `send` says it got through; returns how many went."""
        sent = 0
        with self._lock:
            remove_stale_tmp(self.folder)
            for path in self.entries():
                try:
                    entry = json.loads(path.read_text())
                except (OSError, ValueError):
                    log.warning("dropping an unreadable outbox entry %s", path.name)
                    path.unlink(missing_ok=True)
                    continue
                if not send(entry["path"], entry["body"]):
                    break
                path.unlink(missing_ok=True)
                sent += 1
        return sent
