"""Whether the previous agent ended cleanly, from its run file, with real processes: one that is
SIGKILLed leaves its file behind (the next start reports it, naming its pid), one that ends
cleanly removes it, one still running is not this start's business, and a run file from before
a reboot says the machine restarted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from hostagent.agent_run import RUN_FILE, previous_run_unclean, run_begins, run_ends

ROOT = Path(__file__).resolve().parent.parent.parent
BEGIN_AND_WAIT = "import sys, time; from pathlib import Path; from hostagent.agent_run import run_begins; " \
    "run_begins(Path(sys.argv[1])); print('begun', flush=True); time.sleep(120)"  # fmt: skip


def _agent_like(state: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", BEGIN_AND_WAIT, str(state)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "begun"
    return proc


def test_a_killed_run_is_found_by_the_next_start_and_a_running_one_is_not(tmp_path: Path) -> None:
    proc = _agent_like(tmp_path)
    try:
        assert previous_run_unclean(tmp_path) is None  # it still runs
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    reason = previous_run_unclean(tmp_path)
    assert reason is not None and f"(pid {proc.pid}, started " in reason
    assert reason.endswith("ended without stopping cleanly: it was killed or it crashed.")


def test_a_clean_stop_leaves_nothing_to_report(tmp_path: Path) -> None:
    assert previous_run_unclean(tmp_path) is None  # the first start ever
    run_begins(tmp_path)
    run_ends(tmp_path)
    assert previous_run_unclean(tmp_path) is None


def test_a_run_from_before_a_reboot_says_the_machine_restarted(tmp_path: Path) -> None:
    proc = _agent_like(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    data = json.loads((tmp_path / RUN_FILE).read_text())
    (tmp_path / RUN_FILE).write_text(json.dumps({**data, "boot_id": "another-boot"}))
    reason = previous_run_unclean(tmp_path)
    assert reason is not None and reason.endswith("did not stop cleanly: the machine restarted under it.")
