"""Figures about the code's shape, for a closing note or a review: size, repetition, engine
branches outside the engine adapters, parameters typed `Any`, and imports that run back up the
layers (DESIGN.md). Works on the working tree or on any earlier commit, whichever layout it had.

    python -m tools.code_figures                 # this working tree
    python -m tools.code_figures --rev 0882e0c   # an earlier commit (read with git archive)

The layer map (`layer_of`) is also what tests/test_layers.py pins, so the figure printed here
and the limit the suite enforces are the same count.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

PACKAGES = (
    "controlpanel",
    "core",
    "people",
    "serving",
    "hardware",
    "deployments",
    "schedules",
    "notifications",
    "changes",
    "rollouts",
    "dashboard",
    "api",
    "labrouter",
    "embedded",
    "hostagent",
)
NOT_PRODUCTION = ("tests", "bench", "tools", "docs", "examples", "scripts")

# The stack, bottom to top. controlpanel's plumbing (settings, the Celery app, the broker's
# accounts, roles, the change context, parameters, hardening) sits under everything; its top
# (urls, middleware, wsgi) over the apps. The host agent stands beside the panel's apps, on the
# serving core.
PLUMBING = tuple(
    f"controlpanel.{m}"
    for m in (
        "settings",
        "settings_shared",
        "settings_agent",
        "celery",
        "broker",
        "roles",
        "context",
        "params",
        "hardening",
    )
)
# people (the panel's accounts: people, roles, sign-in, single sign-on) reads only core and the
# plumbing: everything above may ask who someone is.
RANKS = {"plumbing": 0, "core": 1, "people": 2, "serving": 3, "hardware": 4, "hostagent": 4, "notifications": 5}
# schedules stands beside deployments: it runs deployments' services when a change is due, and
# deployments' entry points (the switch page, the alias form, the commands) offer "later" through it.
# changes (change requests of protected hosts) runs deployments' services: it sits on them.
# rollouts beside them too: its waves run deployments' switches, "later" through schedules, and a
# due rollout is one of schedules' kinds.
# The dashboard reads deployments and hardware and writes nothing: a page over them.
RANKS |= {"deployments": 6, "schedules": 6, "rollouts": 6, "changes": 7, "dashboard": 7}
# The API and the lab router are entry points over the apps (the router reads deployments' route
# table and forwards with the front door's data plane); controlpanel's top (urls, middleware)
# gathers the pages; the embedded supervisor runs all of it as processes, above everything.
RANKS |= {"api": 8, "labrouter": 8, "controlpanel": 9, "embedded": 10}
# Where the serving core and the agent's runtime lived before they had packages of their own, and
# the lab router, people and the embedded supervisor before they left controlpanel.
OLD_HOMES = {
    "serving": tuple(
        f"deployments.{m}"
        for m in (
            "planner",
            "engines",
            "diffing",
            "benchmarking",
            "arch",
            "safety",
            "checks",
            "exports",
            "ansible_role",
            "ansible_vars",
            "operation_tasks",
        )
    ),
    "hostagent": ("hardware.runtime", "hardware.probes"),
    "labrouter": ("controlpanel.router",),
    "people": ("controlpanel.people",),
    "embedded": ("controlpanel.embedded",),
}
ENGINES = {"vllm", "llamacpp", "llama.cpp", "ollama", "sglang"}
ADAPTERS = ("serving/engines/", "deployments/engines/")


def layer_of(module: str) -> str:
    """The layer a first-party module belongs to (a key of RANKS)."""
    if module.startswith(PLUMBING):
        return "plumbing"
    for layer, homes in OLD_HOMES.items():
        if any(module == h or module.startswith(h + ".") for h in homes):
            return layer
    return module.split(".")[0]


def _modules(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            if "migrations" not in path.parts:
                found[".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the first-party modules it imports, at module level or inside a function."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                parts = here[: len(here) - node.level + 1] if node.level else []
                base = ".".join(parts + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module and not module.startswith(target + "."):
                    graph[module].add(target)
    return graph


def backup_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a lower layer into a higher one, as 'module -> target'."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if RANKS[layer_of(module)] < RANKS[layer_of(target)]
    )


def _production_files(root: Path, suffix: str = ".py") -> Iterator[Path]:
    for path in sorted(root.rglob(f"*{suffix}")):
        rel = path.relative_to(root)
        if rel.parts[0] in NOT_PRODUCTION or "migrations" in rel.parts or rel.parts[0].startswith("."):
            continue
        yield path


def _is_engine_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in ENGINES


# A template's or a script's comparison with an engine's name: `engine == "vllm"`, `"ollama" != e`.
_NAMED = "|".join(re.escape(e) for e in sorted(ENGINES))
TEXT_BRANCH = re.compile(rf"""(?:==|!=)\s*["'](?:{_NAMED})["']|["'](?:{_NAMED})["']\s*(?:==|!=)""")


def engine_branches(root: Path) -> dict[str, int]:
    """Comparisons with an engine's name (`== "vllm"`, `in ("vllm", "sglang")`) outside the adapters,
    in the Python and in the templates and scripts of the pages."""
    counts: dict[str, int] = {}
    for suffix in (".html", ".js"):
        for path in _production_files(root, suffix):
            if n := len(TEXT_BRANCH.findall(path.read_text())):
                counts[path.relative_to(root).as_posix()] = n
    for path in _production_files(root):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(ADAPTERS):
            continue
        n = 0
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            for side in [node.left, *node.comparators]:
                members = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(_is_engine_name(m) for m in members):
                    n += 1
                    break
        if n:
            counts[rel] = n
    return counts


def _is_any(annotation: ast.AST | None) -> bool:
    if isinstance(annotation, ast.Name):
        return annotation.id == "Any"
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "Any"
    return isinstance(annotation, ast.Constant) and annotation.value == "Any"


def any_parameters(root: Path) -> int:
    """Parameters annotated `Any` (including *args and **kwargs) in production code."""
    n = 0
    for path in _production_files(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p)]
                n += sum(_is_any(p.annotation) for p in params)
    return n


def lines(root: Path) -> tuple[int, int]:
    """Lines of Python in production code and in the tests."""
    production = sum(len(p.read_text().splitlines()) for p in _production_files(root))
    tests = sum(len(p.read_text().splitlines()) for p in (root / "tests").rglob("*.py"))
    return production, tests


def duplicate_pairs(root: Path) -> str:
    """What the `duplicates` command says of the production code alone (Python, templates, JS, CSS)."""
    if not shutil.which("duplicates"):
        return "n/a (the duplicates command is not on PATH)"
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in (".py", ".html", ".js", ".css"):
            for path in _production_files(root, suffix):
                target = Path(tmp) / path.relative_to(root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        out = subprocess.run(
            ["duplicates", "--repo", tmp, "--most", "1", "--seconds", "300"], capture_output=True, text=True
        ).stdout
    first = out.splitlines()[0] if out else ""
    match = re.match(r"(\d+) pairs", first)
    boilerplate = re.search(r"(\d+) of those marked boilerplate", first)
    if not match:
        return first
    return match.group(1) + (f" ({boilerplate.group(1)} of them marked boilerplate)" if boilerplate else "")


def figures(root: Path) -> dict[str, object]:
    production, tests = lines(root)
    branches = engine_branches(root)
    return {
        "lines of Python, production": production,
        "lines of Python, tests": tests,
        "duplicate pairs, production": duplicate_pairs(root),
        "engine-name branches outside the adapters": f"{sum(branches.values())} in {len(branches)} files",
        "parameters typed Any": any_parameters(root),
        "imports back up the layers": len(backup_imports(import_graph(root))),
    }


def _checkout(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", "--format=tar", rev], capture_output=True, check=True).stdout
    tar = into / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as handle:
        handle.extractall(into / "src", filter="data")
    return into / "src"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", help="a commit to measure instead of the working tree")
    parser.add_argument("--list", action="store_true", help="also list the back-up imports and engine branches")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = _checkout(args.rev, Path(tmp)) if args.rev else Path.cwd()
        for name, value in figures(root).items():
            print(f"{name:45} {value}")
        if args.list:
            print("\nimports back up the layers:", *backup_imports(import_graph(root)), sep="\n  ")
            print("\nengine-name branches:", *(f"{f}: {n}" for f, n in engine_branches(root).items()), sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
