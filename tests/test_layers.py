"""The pure domain core stays pure: importing it loads no Django, no Celery, no HTTP client and
no NVML (docs/architecture.md: the bottom layer). Checked in a fresh interpreter, so nothing else pre-loads them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.code_figures import backup_imports, function_imports, import_graph, mutual_folders

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("django", "celery", "kombu", "httpx", "pynvml", "psycopg", "redis")
PURE = [
    "core.atomicfile",
    "core.hub_paths",
    "core.secrets_mask",
    "core.maintenance",
    "serving.arch",
    "serving.binds",
    "serving.safety",
    "serving.planner",
    "serving.engines.registry",
    "serving.diffing",
    "serving.exports",
    "serving.ansible_vars",
    "serving.benchmarking.stats",
    "serving.benchmarking.profiles",
    "serving.benchmarking.results",
    "serving.benchmarking.workload",
    "serving.rollouts",
    "serving.tuning",
]
# The host runtime uses the OS and HTTP, but never the ORM (GPU hosts may later run without DB access).
RUNTIME = [
    "hostagent.runtime.supervisor",
    "hostagent.runtime.watchdog",
    "hostagent.runtime.installs",
    "hostagent.runtime.childenv",
    "hostagent.runtime.loadgen",
    "hostagent.runtime.energy",
    "hostagent.probes.nvml",
    "hostagent.probes.host",
    "hostagent.probes.host_usage",
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


def test_the_front_door_loads_no_django_and_nothing_of_the_panel():
    """The host's front door (hostagent/frontdoor) runs beside the agent as its own async process:
    aiohttp and prometheus_client, no framework of the panel, none of its apps, no second HTTP client."""
    loaded = loaded_after_import("hostagent.frontdoor.__main__")
    assert "aiohttp" in loaded
    assert not loaded & {"django", "celery", "kombu", "psycopg", "redis", "httpx", "pynvml"}
    assert not loaded & {"controlpanel", "core", "serving", "deployments", "hardware", "notifications", "api"}


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
    from serving.operation_tasks import OPERATION_TASKS

    code = (
        "import django, json; django.setup(); import hostagent.tasks; from controlpanel.celery import app; "
        "print(json.dumps(sorted(app.tasks)))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SECRET_KEY")}
    env["DJANGO_SETTINGS_MODULE"] = "controlpanel.settings_agent"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    registered = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert set(OPERATION_TASKS.values()) <= registered
    sent = {"switch", "launch", "stop", "probe", "benchmark", "install"}
    assert sent <= set(OPERATION_TASKS) and sent <= set(OperationKind.values)


# --- import circles --------------------------------------------------------------------------
# No module of the panel, the agent or the API imports itself back through others, at module level
# or inside a function. (A package's submodules importing the package itself, its re-exports, do
# not count.)


def _import_graph() -> dict[str, set[str]]:
    """Module -> first-party modules it imports anywhere (module level or inside a function)."""
    return import_graph(ROOT)


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_circle_is_left():
    """The last ones went with the apps' untangling: hardware <-> deployments (Host.active_revision),
    switch's private _enqueue through tasks and host_ops, DeploymentRevision.concerns -> presenters
    (now the revision_concerns template tag), engines.base <-> policy, the planner's fit <-> rules
    and gpus <-> inputs."""
    assert [sorted(c) for c in _circles(_import_graph())] == []


# --- the layout: core, the Django-free serving core, the panel's apps, the agent beside them ---
# tools/code_figures.py holds the layer map (the same one its figures are printed with).


def test_the_serving_core_is_a_package_of_its_own_and_imports_no_django_app():
    """planner, engine adapters, diff, benchmark maths, architecture facts, exports: in `serving`,
    which reads only `core`'s pure helpers; nothing of them is left in `deployments`."""
    graph = _import_graph()
    for gone in ("planner", "engines", "diffing", "benchmarking", "arch", "safety", "exports", "ansible_vars"):
        assert not (ROOT / "deployments" / gone).exists() and not (ROOT / "deployments" / f"{gone}.py").exists()
    reads = {t for m, targets in graph.items() if m.startswith("serving") for t in targets}
    assert {t.split(".")[0] for t in reads} <= {"serving", "core"}
    assert {t for t in reads if t.startswith("core")} <= set(PURE_CORE)


def test_the_host_runtime_and_probes_live_in_the_agent_package():
    assert (ROOT / "hostagent" / "runtime" / "supervisor.py").is_file()
    assert (ROOT / "hostagent" / "probes" / "nvml.py").is_file()
    assert not (ROOT / "hardware" / "runtime").exists() and not (ROOT / "hardware" / "probes").exists()


def test_the_one_import_back_up_the_layers_is_known():
    """Bottom to top: controlpanel's plumbing, core, people, serving, hardware (and the agent beside
    it), notifications, schedules, deployments, rollouts and the dashboard, changes, api and the lab
    router, controlpanel's top, the embedded supervisor. One import runs from a layer into one
    above it: the settings check the lab router's bind with the pure core's one reading of
    HOST:PORT (the notifications' event builders are handed the serving revision and the previous
    benchmark run they tell of)."""
    assert backup_imports(_import_graph()) == ["controlpanel.settings -> serving.binds"]


def test_schedules_knows_no_kind_of_change_it_runs():
    """The switch, the alias move and the rollout are registered as kinds by deployments and
    rollouts (their schedule_kinds modules), each naming the errors that mean its host is busy;
    a scheduled change passes hardware's review gate; `manage.py schedule` sits with the other
    commands on deployments' command-line base. So schedules imports nothing of either app (and
    the layer map ranks it under deployments, so an arrow back would show above)."""
    graph = _import_graph()
    assert _reaching(graph, "schedules", ("deployments", "rollouts", "changes")) == []


# Imports inside a function, as `python -m tools.code_figures` counts them (issue #38: 129 before,
# 20 after): each one left has a reason that is not a cycle, said here. The figure may only go down:
# one that goes away comes out of this table too.
FUNCTION_IMPORTS = {
    # Django's app registry: what an app connects or registers when it is ready.
    "api.apps -> .",
    "changes.apps -> .services",
    "changes.apps -> hardware.review",
    "deployments.apps -> .services",
    "people.apps -> .oidc",
    "people.apps -> controlpanel.roles",
    "rollouts.apps -> .",
    "tuning.apps -> .",
    # `python -m labrouter`: the router's modules read the database, after django.setup().
    "labrouter.__main__ -> .run",
    # Libraries that load only where they are used: apprise (notifications.channels), and the hub's
    # client beside its deadline (deployments.importers.hub_deadline).
    "notifications.services -> .channels",
    "deployments.importers.hub -> .hub_deadline",
    # The panel runs host code only where it imports a local file or names the host's setting
    # (PANEL_RUNS_HOST_CODE below): its web processes never load the agent's code.
    "deployments.services.imports -> hostagent.runtime.confine",
    "deployments.services.imports -> hostagent.runtime.errors",
    "deployments.services.installs -> hostagent.runtime.confine",
    # The planner's own (serving/planner/).
    "serving.planner.gpus -> core.limits",
    "serving.planner.gpus -> serving.planner.errors",
    "serving.planner.rules -> serving.planner.knobs",
    "serving.planner.weights -> serving.planner.memory",
}
MOST_FUNCTION_IMPORTS = 21  # 20, and the tuning app's registry (tuning.apps)


def test_imports_hidden_in_functions_are_the_known_few():
    found = function_imports(ROOT)
    arrows = {f"{line.split(':')[0]} -> {line.split(' -> ')[1]}" for line in found}
    assert sorted(arrows - FUNCTION_IMPORTS) == []
    assert len(found) <= MOST_FUNCTION_IMPORTS


def test_folders_that_import_each_other_are_the_known_ones():
    """Top level: only controlpanel and deployments, because controlpanel holds both the plumbing
    every app reads (roles, parameters, the Celery app) and the URLs that gather the apps' pages.
    Inside deployments: only its models and its services (the models' modules, forms and tasks call
    services, services read models); selectors call no service (the planner is deployments/planning.py,
    an install's time left is a read, selectors/installs.py, and the lab router's route table, which
    calls the door's services, is services/lab_routes.py). Either list may only get shorter."""
    assert set(mutual_folders(ROOT)) <= {"controlpanel <-> deployments"}
    assert set(mutual_folders(ROOT, "deployments")) <= {"deployments <-> deployments/services"}


def _reaching(graph: dict[str, set[str]], prefix: str, into: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module == prefix or module.startswith(prefix + ".")
        for target in targets
        if target.split(".")[0] in into
    )


def test_core_imports_no_app_above_it():
    assert _reaching(_import_graph(), "core", ("hardware", "deployments", "notifications", "api", "hostagent")) == []


def test_hardware_knows_nothing_of_revisions_or_operations():
    """Hosts, GPUs, samples, credentials, their services, selectors, admin and tasks: no import of
    deployments (nor of what sits on it), at module level or inside a function."""
    graph = _import_graph()
    assert {"hardware.models", "hardware.services", "hardware.selectors", "hardware.credentials"} <= set(graph)
    assert _reaching(graph, "hardware", ("deployments", "notifications", "api", "hostagent")) == []


def test_hardware_models_name_no_model_of_deployments():
    """Not even by a lazy "app.Model" reference: the pointer to what a host serves is deployments'."""
    from django.apps import apps

    for model in apps.get_app_config("hardware").get_models():
        for field in model._meta.get_fields():
            if field.is_relation and field.concrete:
                assert field.related_model._meta.app_label != "deployments", f"{model.__name__}.{field.name}"


# The agent's side: hostagent reads only the serving core, core's pure helpers and the panel's
# plumbing it shares (the Celery app, the broker's settings), never the panel's database side.
PURE_CORE = (
    "serving",
    "core.limits",
    "core.errors",
    "core.atomicfile",
    "core.hub_paths",
    "core.hub_client",
    "core.secrets_mask",
)
AGENT_PLUMBING = ("controlpanel.celery", "controlpanel.broker")
# The embedded default runs panel and agent on one machine: its supervisor (embedded),
# `manage.py host register-local`, `engine first-install` and the import of a local GGUF read that
# machine with the agent's own code (its probe, its model-folder rules). Nowhere else does the panel's
# side run host code, but for the lab router's use of the front door's data plane (below).
PANEL_RUNS_HOST_CODE = {
    "embedded.panel -> hostagent.probe",
    "embedded.panel -> hostagent.runtime.processes",
    "embedded.panel -> hostagent.runtime.supervisor",
    "deployments.management.commands.host -> hostagent.probe",
    "deployments.management.commands.engine -> hostagent.probe",  # this machine, as register-local names it
    "deployments.services.imports -> hostagent.runtime.confine",
    "deployments.services.imports -> hostagent.runtime.errors",
    "deployments.services.installs -> hostagent.runtime.confine",  # the name of its setting, in an error
    # The lab router (labrouter) checks inference keys with the front doors' own key table,
    # answers errors in their shape, reaches them as they reach engines, knows a stream's end as they
    # do, listens as they do and exports its metrics on their registry: the doors' Django-free data plane.
    # It reads a body's model as they do, whatever the API (apis.py), within their connection limits,
    # and ends a stream it cannot finish with that API's error event, as they do (apis.cut_event).
    "labrouter.app -> hostagent.frontdoor.apis",
    "labrouter.app -> hostagent.frontdoor.keys",
    "labrouter.app -> hostagent.frontdoor.limits",
    "labrouter.app -> hostagent.frontdoor.proxy",
    "labrouter.app -> hostagent.frontdoor.server",
    "labrouter.forward -> hostagent.frontdoor.apis",
    "labrouter.forward -> hostagent.frontdoor.proxy",
    "labrouter.forward -> hostagent.frontdoor.usage",
    "labrouter.metrics -> hostagent.frontdoor.metrics",
    "labrouter.run -> hostagent.frontdoor.limits",
}


def test_the_agent_reads_only_the_pure_core_and_the_panel_never_the_agent():
    graph = _import_graph()
    agent = [m for m in graph if m.startswith("hostagent")]
    reads = {f"{m} -> {t}" for m in agent for t in graph[m] if not t.startswith("hostagent")}
    assert sorted(r for r in reads if not r.split(" -> ")[1].startswith(PURE_CORE + AGENT_PLUMBING)) == []
    panel = [m for m in graph if not m.startswith("hostagent")]
    runs = {f"{m} -> {t}" for m in panel for t in graph[m] if t.startswith("hostagent")}
    assert runs <= PANEL_RUNS_HOST_CODE
