"""Two real PostgreSQL transactions in one test (the test needs `django_db(transaction=True)`).

`held_open(work)` runs `work()` in a transaction of its own, on another connection, and keeps it
open (its row locks held) until the block ends, then commits it. `lock_timeout()` makes the test's
own connection give up on a lock after a few seconds ("canceling statement due to lock timeout")
instead of hanging, so "X does not wait for Y" fails quickly and clearly. `Background` runs work
that is expected to wait, and `wait_for_a_lock_wait()` says when it does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction


class Background:
    """`work()` in a thread, in its own transaction on its own connection; `result()` joins it
    and answers what it returned, or raises what it raised."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self._work = work
        self._out: list[Any] = []
        self._failed: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with transaction.atomic():
                self._out.append(self._work())
        except BaseException as exc:  # noqa: BLE001 - raised again in result()
            self._failed.append(exc)
        finally:
            connection.close()

    def result(self, timeout: float = 30) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the background transaction is still waiting"
        if self._failed:
            raise self._failed[0]
        return self._out[0]


@contextmanager
def held_open(work: Callable[[], Any]) -> Iterator[Any]:
    """Yields what `work()` answered, its transaction still open; it commits when the block ends
    (what it raised is raised then)."""
    done, release = threading.Event(), threading.Event()
    out: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            with transaction.atomic():
                out.append(work())
                done.set()
                release.wait(60)
        except BaseException as exc:  # noqa: BLE001 - raised again below
            failed.append(exc)
        finally:
            done.set()
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert done.wait(30), "the held transaction did not get through its work"
        if failed:
            raise failed[0]
        yield out[0]
    finally:
        release.set()
        thread.join(30)
    if failed:
        raise failed[0]


@contextmanager
def lock_timeout(seconds: int = 3) -> Iterator[None]:
    """The test's own connection waits at most `seconds` for a row lock."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET lock_timeout = '{int(seconds)}s'")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")


def wait_for_a_lock_wait(timeout: float = 10) -> None:
    """Returns once another connection to this database waits on a lock (AssertionError at
    `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.05)
    raise AssertionError("no connection came to wait on a lock")
