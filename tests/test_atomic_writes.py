"""What a power loss or a kill leaves is never trusted half-written: every state file of the agent
(engine.json, watchdog.json, pauses, starts.jsonl's trim), its outbox entries and a download's
checksum marker are written through core.atomicfile (temporary file, fsync, rename, fsync of the
folder). A writer SIGKILLed in the middle of a write (a real process, killed for real) leaves the
previous file whole and a temporary file that the next start sweeps and nothing reads."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

from core.atomicfile import remove_stale_tmp, tmp_path_for, write_atomic
from hostagent.outbox import Outbox
from hostagent.runtime.state import StateDir

ROOT = Path(__file__).resolve().parent.parent

# A writer that stops half-way through a file (flushed, so the bytes are on the disk) and waits to be killed.
HALF_WRITER = """
import sys, time
from core.atomicfile import atomic_writer
with atomic_writer(sys.argv[1]) as handle:
    handle.write('{"pid": 1, "half": "')
    handle.flush()
    print("half-way", flush=True)
    time.sleep(60)
    handle.write('written"}')
"""


def _kill_half_way(path: Path) -> int:
    writer = subprocess.Popen(
        [sys.executable, "-c", HALF_WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "half-way"
    writer.send_signal(signal.SIGKILL)
    writer.wait(10)
    return writer.pid


def test_a_state_file_whose_writer_was_killed_half_way_is_the_previous_one(tmp_path):
    state = StateDir(tmp_path / "host")
    (state.path / "watchdog.json").write_text(json.dumps({"restarts": [1, 2]}))

    pid = _kill_half_way(state.watchdog_file)

    assert json.loads(state.watchdog_file.read_text()) == {"restarts": [1, 2]}
    [leftover] = state.path.glob(f".watchdog.json.{pid}_*.tmp")  # the killed writer's (pid, thread)
    assert leftover.read_text().startswith('{"pid": 1, "half"')
    StateDir(state.path)  # the next start of the agent or the supervisor
    assert not leftover.exists()
    assert sorted(p.name for p in state.path.iterdir()) == ["pauses", "watchdog.json"]


def test_an_outbox_entry_is_whole_or_absent_and_a_killed_put_is_never_sent(tmp_path):
    outbox = Outbox(tmp_path / "outbox")
    outbox.put("/agent/v1/telemetry", {"gpus": [1]}, kind="telemetry")
    torn = tmp_path / "outbox" / ".00000000000000000001-000001-result.json.999999999.tmp"
    torn.write_text('{"path": "/agent/v1/finish", "bo')  # what a writer killed mid-put leaves (its pid is gone)

    sent: list[tuple[str, dict]] = []
    assert outbox.drain(lambda path, body: sent.append((path, body)) or True) == 1
    assert sent == [("/agent/v1/telemetry", {"gpus": [1]})]
    assert list((tmp_path / "outbox").iterdir()) == []


def test_a_live_writers_temporary_file_is_left_alone(tmp_path):
    live = tmp_path_for(tmp_path / "engine.json")  # this process's (and thread's) own name
    live.write_text("{")
    dead = tmp_path / ".engine.json.999999999.tmp"
    dead.write_text("{")
    assert remove_stale_tmp(tmp_path) == 1
    assert live.exists() and not dead.exists()


def test_two_threads_writing_one_file_each_leave_it_whole(tmp_path):
    """The agent's door reporter and its stop path both save the door's usage file: two threads of
    one process writing the same file never take each other's temporary file (a lost rename raised
    FileNotFoundError in one of them), and the file is always one writer's whole value."""
    target = tmp_path / "frontdoor-usage.json"
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def write(n: int) -> None:
        start.wait()
        try:
            for i in range(150):
                write_atomic(target, json.dumps({"writer": n, "i": i, "pad": "x" * 4096}))
        except BaseException as exc:  # noqa: BLE001 - any failure of a writer is the finding
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    assert errors == []
    assert json.loads(target.read_text())["i"] == 149
    assert [p.name for p in tmp_path.iterdir()] == ["frontdoor-usage.json"]
