"""The host's own check before an install reads a folder: a wheelhouse or a llama.cpp checkout
runs its code on the host, so it must resolve (symlinks followed, `..` collapsed) inside the
folders the host's administrator allowed in CONTROLPANEL_INSTALL_DIRS; none are by default.
The agent reports those folders with its facts, so the panel can refuse early."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostagent.runtime.confine import PathOutsideInstallFolders, confine_install_folder, install_dirs_from_env
from hostagent.runtime.errors import HostRuntimeError


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    allowed = tmp_path / "wheels"
    (allowed / "offline").mkdir(parents=True)
    planted = tmp_path / "planted"
    planted.mkdir()
    return allowed, planted


def test_the_setting_is_parsed_like_the_model_folders_and_allows_nothing_by_default():
    assert install_dirs_from_env({}) == []
    assert install_dirs_from_env({"CONTROLPANEL_INSTALL_DIRS": "/srv/wheels/:/opt/src, /x/../y"}) == [
        "/srv/wheels",
        "/opt/src",
        "/y",
    ]
    with pytest.raises(HostRuntimeError) as info:
        install_dirs_from_env({"CONTROLPANEL_INSTALL_DIRS": "/srv/wheels:relative"})
    assert "CONTROLPANEL_INSTALL_DIRS must hold absolute paths" in info.value.reason


def test_a_folder_inside_an_allowed_one_is_read_by_its_real_path(folders, tmp_path: Path):
    allowed, _ = folders
    assert confine_install_folder("wheelhouse", str(allowed / "offline"), [str(allowed)]) == str(allowed / "offline")
    os.symlink(allowed, tmp_path / "wheels-link")  # an allowed folder named through a link still counts
    assert confine_install_folder("wheelhouse", str(allowed), [str(tmp_path / "wheels-link")]) == str(allowed)


@pytest.mark.parametrize("how", ["symlink", "dotdot", "outside", "none allowed", "relative", "missing"])
def test_anything_else_is_refused_naming_the_setting(folders, tmp_path: Path, how: str):
    allowed, planted = folders
    dirs = [str(allowed)]
    path = str(planted)
    if how == "symlink":
        os.symlink(planted, allowed / "innocent")
        path = str(allowed / "innocent")
    elif how == "dotdot":
        path = f"{allowed}/../planted"
    elif how == "none allowed":
        dirs = []
    elif how == "relative":
        path = "wheels/offline"
    elif how == "missing":
        path = str(allowed / "not-there")
    with pytest.raises(PathOutsideInstallFolders) as info:
        confine_install_folder("wheelhouse", path, dirs)
    reason = info.value.reason
    assert reason.startswith("wheelhouse: ")
    if how in ("symlink", "dotdot", "outside", "none allowed"):
        assert "CONTROLPANEL_INSTALL_DIRS" in reason
    if how == "symlink":
        assert f"resolves to {planted}" in reason


def test_the_agent_reports_its_install_folders_with_its_facts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Fails on the old probe: it reported the model folders only."""
    from hostagent.probe import probe_local

    monkeypatch.setenv("CONTROLPANEL_INSTALL_DIRS", f"{tmp_path}/wheels:{tmp_path}/src")
    assert probe_local().facts["install_dirs"] == [f"{tmp_path}/wheels", f"{tmp_path}/src"]
    monkeypatch.delenv("CONTROLPANEL_INSTALL_DIRS")
    assert probe_local().facts["install_dirs"] == []
