"""The pure domain core stays pure: importing it loads no Django, no Celery, no HTTP client and
no NVML (DESIGN.md layer 1). Checked in a fresh interpreter, so nothing else pre-loads them."""

from __future__ import annotations

import json
import os
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


def _modules_loaded(settings_module: str, modules: list[str]) -> set[str]:
    """Every module (full dotted name) loaded after django.setup() on `settings_module` and
    importing `modules`, in a fresh interpreter whose environment names no database."""
    imports = "; ".join(f"import {m}" for m in modules)
    code = f"import django, sys, json; django.setup(); {imports}; print(json.dumps(sorted(sys.modules)))"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SECRET_KEY")}
    env["DJANGO_SETTINGS_MODULE"] = settings_module
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


PANEL_SIDE = ("deployments.models", "deployments.services", "hardware.models", "hardware.services", "psycopg")


def test_the_agent_loads_nothing_of_the_panels_database_side():
    """The whole agent (entry, tasks, operations, loops) on its own settings: no model, no service."""
    loaded = _modules_loaded(
        "controlpanel.settings_agent",
        ["hostagent.agent", "hostagent.tasks", "hostagent.loops", "hostagent.management.commands.agent"],
    )
    assert "hostagent.operations.switch" in loaded
    assert not {m for m in loaded if m.startswith(PANEL_SIDE)}


def test_the_panel_never_imports_the_agents_code():
    """Every URL, service and panel task loaded: the host's code is not among them (tasks go by name)."""
    loaded = _modules_loaded(
        "controlpanel.settings",
        [
            "controlpanel.urls",
            "deployments.tasks",
            "hardware.tasks",
            "deployments.services.switch",
            "deployments.services.installs",
            "deployments.services.benchmarks",
            "deployments.agent_api.views",
        ],
    )
    assert not {m for m in loaded if m.startswith("hostagent")}


def test_every_operation_kind_the_panel_sends_is_a_task_the_agent_runs():
    from deployments.choices import OperationKind
    from deployments.operation_tasks import OPERATION_TASKS

    code = (
        "import django, json; django.setup(); import hostagent.tasks; from controlpanel.celery import app; "
        "print(json.dumps(sorted(app.tasks)))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SECRET_KEY")}
    env["DJANGO_SETTINGS_MODULE"] = "controlpanel.settings_agent"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    registered = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert set(OPERATION_TASKS.values()) <= registered
    sent = {"switch", "stop", "probe", "benchmark", "install"}
    assert sent <= set(OPERATION_TASKS) and sent <= set(OperationKind.values)
