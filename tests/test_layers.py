"""The pure domain core stays pure: importing it loads no Django, no Celery, no HTTP client and
no NVML (DESIGN.md layer 1). Checked in a fresh interpreter, so nothing else pre-loads them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("django", "celery", "kombu", "httpx", "pynvml", "psycopg", "redis")
PURE = [
    "deployments.arch",
    "deployments.safety",
    "deployments.planner",
    "deployments.engines.registry",
    "deployments.diffing",
    "deployments.exports",
    "deployments.ansible_vars",
    "deployments.benchmarking.stats",
    "deployments.benchmarking.profiles",
    "deployments.benchmarking.results",
    "deployments.benchmarking.workload",
]
# The host runtime uses the OS and HTTP, but never the ORM (GPU hosts may later run without DB access).
RUNTIME = [
    "hardware.runtime.supervisor",
    "hardware.runtime.watchdog",
    "hardware.runtime.installs",
    "hardware.runtime.loadgen",
    "hardware.runtime.energy",
    "hardware.probes.nvml",
    "hardware.probes.host",
]


def loaded_after_import(module: str) -> set[str]:
    code = f"import sys, json, {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("module", PURE)
def test_domain_core_imports_nothing_from_the_frameworks(module):
    assert not loaded_after_import(module) & set(FORBIDDEN)


@pytest.mark.parametrize("module", RUNTIME)
def test_host_runtime_never_loads_django(module):
    assert not loaded_after_import(module) & {"django", "celery", "psycopg"}
