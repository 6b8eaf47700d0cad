"""What the agent starts for a revision: the panel's RevisionLaunch run through
serving.launch.launch with this host's own facts (its copy of the weights, its model folders),
the engine's key as the panel resolved it, and nothing started outside the model folders."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from hostagent.launch import launch_spec
from hostagent.runtime.confine import PathOutsideModelFolders
from serving.engines.base import EngineConfigError, ModelRef
from serving.launch import RevisionSpec
from serving.wire import RevisionLaunch, WireError


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "gemma.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", str(folder))
    return folder


def _launch(models: Path, **changes: Any) -> RevisionLaunch:
    spec = RevisionSpec(
        engine="llama.cpp",
        version="",
        model=ModelRef(name="gemma", gguf_file="gemma.gguf", format="gguf"),
        knobs={"ctx_size": 2048, "parallel": 2},
        served_name="gemma-r4",
        port=18084,
        api_key_secret="engine-key",
    )
    return dataclasses.replace(RevisionLaunch(id=104, number=4, spec=spec, api_key="sk-engine-4"), **changes)


def _value_after(argv: Sequence[str], flag: str) -> str:
    return argv[list(argv).index(flag) + 1]


def test_the_engine_opens_the_hosts_copy_of_the_weights_with_the_key_the_panel_resolved(models: Path) -> None:
    copy = models / "hub" / "gemma" / "gemma.gguf"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(b"GGUF")
    spec = launch_spec(_launch(models, local_weights=str(copy)), installs={})
    assert _value_after(spec.argv, "--model") == str(copy)
    assert _value_after(spec.argv, "--ctx-size") == "2048" and spec.port == 18084
    assert "sk-engine-4" in [*spec.argv, *spec.env.values()]
    assert spec.cwd == str(models)  # a bare file name is read in the first model folder


def test_without_a_key_from_the_panel_the_engine_gets_none_never_the_mask(models: Path) -> None:
    spec = launch_spec(_launch(models, api_key=None), installs={})
    assert "--api-key" not in spec.argv and not any("*" in value for value in spec.env.values())


def test_a_launch_the_panel_could_not_complete_is_refused_with_its_reason(models: Path) -> None:
    with pytest.raises(EngineConfigError, match="the secret engine-key is not set on this host"):
        launch_spec(_launch(models, error="the secret engine-key is not set on this host"), installs={})


def test_weights_outside_the_model_folders_are_refused_before_anything_starts(models: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.gguf"
    elsewhere.write_bytes(b"GGUF")
    with pytest.raises(PathOutsideModelFolders):
        launch_spec(_launch(models, local_weights=str(elsewhere)), installs={})


def test_a_launch_as_plain_json_starts_the_same_and_a_broken_one_names_its_field(models: Path) -> None:
    typed = _launch(models)
    assert launch_spec(typed.to_dict(), installs={}).argv == launch_spec(typed, installs={}).argv
    old = {"id": 7, "number": 3, "config": {"engine": "llama.cpp", "port": 8011}}  # a panel before the spec
    with pytest.raises(WireError, match="launch.spec is not an object"):
        launch_spec(old, installs={})
