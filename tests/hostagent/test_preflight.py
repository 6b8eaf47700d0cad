"""The host's preflight reads the panel's RevisionLaunch: the weights it checks are the host's
copy (or the catalog's file), at the size the panel imported; the memory it checks is the
planner's (`launch.memory`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from hostagent.launch import launch_spec
from hostagent.preflight import host_preflight, memory_check, weights_check
from hostagent.runtime.supervisor import Supervisor
from serving.checks import FAIL, HOST, OK
from serving.engines.base import ModelRef
from serving.launch import RevisionSpec
from serving.wire import PlannedMemory, RevisionLaunch


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "gemma.gguf").write_bytes(b"G" * 1000)
    monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", str(folder))
    return folder


def _launch(model: ModelRef, engine: str = "llama.cpp", **changes: Any) -> RevisionLaunch:
    spec = RevisionSpec(engine=engine, version="", model=model, port=18090)
    return dataclasses.replace(RevisionLaunch(id=110, number=10, spec=spec), **changes)


GGUF = ModelRef(name="gemma", gguf_file="gemma.gguf", format="gguf")


def test_the_catalogs_file_is_read_in_the_model_folder_at_its_imported_size(models: Path) -> None:
    launch = _launch(GGUF, weights_bytes=1000)
    check = weights_check(launch, launch_spec(launch, installs={}))
    assert check.status == OK
    assert check.message == f"{models / 'gemma.gguf'} is there and readable (1,000 bytes as imported)."


def test_a_partial_copy_of_the_weights_is_refused_naming_both_sizes(models: Path) -> None:
    copy = models / "hub" / "gemma.gguf"
    copy.parent.mkdir()
    copy.write_bytes(b"G" * 400)
    launch = _launch(GGUF, local_weights=str(copy), weights_bytes=1000)
    check = weights_check(launch, launch_spec(launch, installs={}))
    assert check.status == FAIL
    assert check.message == f"The weights file {copy} is 400 bytes, not the 1,000 bytes imported (a partial download?)."


def test_a_hub_model_is_left_to_the_engine(models: Path) -> None:
    launch = _launch(ModelRef(name="qwen", repo_id="Qwen/Qwen3-8B"), engine="vllm")
    check = weights_check(launch, launch_spec(launch, installs={}))
    assert check.status == HOST and check.message.startswith("Qwen/Qwen3-8B comes from the hub cache")


def test_a_cpu_host_refuses_what_the_planner_says_does_not_fit(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "host")
    huge = memory_check(PlannedMemory(weights=2**50, kv=2**40), sup, cpu_only=True)
    assert huge is not None and huge.status == FAIL and "do not fit" in huge.message
    small = memory_check(PlannedMemory(weights=1000, kv=24), sup, cpu_only=True)
    assert small is not None and small.status == OK and "weights 1,000 + KV cache 24 = 1,024 bytes fit" in small.message
    whole = memory_check(PlannedMemory(devices={"ram": 1_500}, weights=1000, kv=24), sup, cpu_only=True)
    assert whole is not None and "weights 1,000 + KV cache 24 + buffers and runtime 476 = 1,500 bytes" in whole.message
    unknown = memory_check(PlannedMemory(), sup, cpu_only=True)
    assert unknown is not None and unknown.status == HOST


def test_every_check_runs_before_anything_is_stopped_and_the_plan_can_refuse(models: Path, tmp_path: Path) -> None:
    launch = _launch(GGUF, weights_bytes=1000, memory=PlannedMemory(weights=2**50, kv=0))
    checks = host_preflight(
        launch, launch_spec(launch, installs={}), Supervisor(tmp_path / "host"), installs={}, cpu_only=True
    )
    assert [c.name for c in checks] == ["engine", "port", "weights", "memory"]
    assert [c.status for c in checks][2:] == [OK, FAIL]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "ollama"])
def test_the_weights_checked_are_what_the_engine_is_given(models: Path, engine: str) -> None:
    """The preflight asks the adapter what the engine loads (`model_reference`) instead of working
    it out beside it: a model imported from a folder (no repository) is that folder, checked (here
    missing); an Ollama model is its tag, not the repository it was made from."""
    folder = str(models / "qwen3-8b")
    if engine == "ollama":
        model = ModelRef(name="qwen3:8b", repo_id="Qwen/Qwen3-8B", format="ollama")
    else:
        model = ModelRef(name=folder)
    launch = _launch(model, engine=engine)
    spec = launch_spec(launch, installs={})
    check = weights_check(launch, spec)
    if engine == "ollama":
        assert check.status == HOST and check.message.startswith("qwen3:8b ")
    else:
        assert folder in spec.argv
        assert (check.status, check.message) == (FAIL, f"The model folder {folder} is not there or not readable.")
