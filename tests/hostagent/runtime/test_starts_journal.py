"""The supervisor's journal of starts (state/starts.jsonl) that the agent ships engine logs from:
bounded, newest kept, and a line being written (a torn last line) never breaks the reader."""

from __future__ import annotations

from pathlib import Path

from hostagent.runtime.state import STARTS_KEPT, EngineRecord, StateDir


def _record(pid: int) -> EngineRecord:
    return EngineRecord(
        pid=pid, pgid=pid, start_ticks=0, engine="llama.cpp", revision_label=f"r{pid}", revision_id=str(pid),
        served_name="m", host="127.0.0.1", port=8080, argv=[], env_keys=[], health_url="", models_url="",
        chat_url="", metrics_url=None, log_path="engine.log", log_offset=pid * 10, started_at=f"t{pid}",
    )  # fmt: skip


def test_the_journal_keeps_the_newest_starts_within_its_bound(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    for pid in range(1, 3 * STARTS_KEPT + 2):
        state.record_start(_record(pid))
    starts = state.read_starts()
    assert len(starts) <= 2 * STARTS_KEPT
    assert starts[-1]["pid"] == 3 * STARTS_KEPT + 1 and starts[-1]["log_offset"] == (3 * STARTS_KEPT + 1) * 10
    assert [s["pid"] for s in starts] == sorted(s["pid"] for s in starts)


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.record_start(_record(1))
    with open(state.starts_file, "a") as handle:
        handle.write('{"pid": 2, "log_of')
    assert [s["pid"] for s in state.read_starts()] == [1]
    state.record_start(_record(3))  # the next start is not glued to the torn line
    assert [s["pid"] for s in state.read_starts()] == [1, 3]
