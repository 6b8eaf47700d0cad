"""Gives each pytest-xdist worker its own Redis database and data folder (``-p tests.parallel``).

Loaded as a plugin before pytest-django sets Django up, so the settings read the worker's own
values: worker ``gwN`` uses the Redis database ``base - 1 - N`` of CELERY_BROKER_URL's (15 gives
14 and 13 to two workers) and ``CONTROLPANEL_DATA_DIR/gwN``. Tests that flush their broker or
write the data folder then never see another worker's queues or files; pytest-django already gives
each worker its own test database (``test_<name>_gwN``). Without xdist it changes nothing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def worker_broker_url(url: str, index: int) -> str:
    """The broker URL with the Redis database moved down by ``index + 1``."""
    parts = urlsplit(url)
    base = int(parts.path.lstrip("/") or 0)
    database = base - 1 - index
    if database < 0:
        raise ValueError(f"CELERY_BROKER_URL's database {base} leaves no Redis database for xdist worker {index}")
    return urlunsplit(parts._replace(path=f"/{database}"))


def _isolate() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    match = re.fullmatch(r"gw(\d+)", worker)
    if match is None:
        return
    index = int(match.group(1))
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if broker.startswith("redis://"):
        os.environ["CELERY_BROKER_URL"] = worker_broker_url(broker, index)
    data = os.environ.get("CONTROLPANEL_DATA_DIR")
    if data:
        folder = Path(data) / worker
        folder.mkdir(parents=True, exist_ok=True)
        os.environ["CONTROLPANEL_DATA_DIR"] = str(folder)


_isolate()
