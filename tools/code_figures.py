"""Figures about the code's shape, for a closing note or a review: size, repetition, engine
branches outside the engine adapters, parameters typed `Any`, imports that run back up the layers
(docs/architecture.md), untyped dicts and string-key reads on the agent's side, imports hidden in
functions, folders that import each other, and long functions. Works on the working tree or on any
earlier commit, whichever layout it had.

    python -m tools.code_figures                 # this working tree
    python -m tools.code_figures --rev 0882e0c   # an earlier commit (read with git archive)
    python -m tools.code_figures --list          # and what the counts count, by name

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
    "tuning",
    "dashboard",
    "api",
    "labrouter",
    "embedded",
    "hostagent",
)
NOT_PRODUCTION = ("tests", "bench", "tools", "docs", "examples", "scripts")

# The stack, bottom to top. controlpanel's plumbing (settings, the Celery app, the broker's
# accounts, roles, parameters, hardening; the change context too, before it joined core's audit)
# sits under everything; its top
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
# schedules sits under deployments: it runs a change when it is due through the kind the owning app
# registered (deployments the switch and the alias move, rollouts the rollout), passes it through
# hardware's review gate, and imports nothing of deployments or rollouts; deployments' entry points
# (the switch page, the alias form, the commands, `manage.py schedule` among them) offer "later"
# through it. rollouts sits on deployments: its waves run deployments' switches. changes (change
# requests of protected hosts) runs deployments' and rollouts' services: it sits on them.
# tuning (where it is) sits on deployments as rollouts do: a run is a chain of deployments' switches
# and benchmarks, and a change request of kind `tuning` (changes) starts one.
# The dashboard reads deployments and hardware and writes nothing: a page over them.
RANKS |= {"schedules": 6, "deployments": 7, "rollouts": 8, "tuning": 8, "changes": 9, "dashboard": 8}
# The API and the lab router are entry points over the apps (the router reads deployments' route
# table and forwards with the front door's data plane); controlpanel's top (urls, middleware)
# gathers the pages; the embedded supervisor runs all of it as processes, above everything.
RANKS |= {"api": 10, "labrouter": 10, "controlpanel": 11, "embedded": 12}
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


# --- the agent's untyped dicts and its string-key reads (issue #38) ---------------------------


def _is_name(node: ast.AST, *names: str) -> bool:
    return (isinstance(node, ast.Name) and node.id in names) or (isinstance(node, ast.Attribute) and node.attr in names)


def _dict_str_any(node: ast.AST) -> bool:
    """`dict[str, Any]` (or `Dict[...]`, `typing.Any`)."""
    if not (isinstance(node, ast.Subscript) and _is_name(node.value, "dict", "Dict")):
        return False
    key = node.slice
    return (
        isinstance(key, ast.Tuple)
        and len(key.elts) == 2
        and _is_name(key.elts[0], "str")
        and _is_name(key.elts[1], "Any")
    )


def _trees(root: Path, folder: str) -> Iterator[tuple[str, ast.AST]]:
    for path in sorted((root / folder).rglob("*.py")):
        if "migrations" not in path.parts:
            yield path.relative_to(root).as_posix(), ast.parse(path.read_text())


def dict_str_any(root: Path, folder: str = "hostagent") -> dict[str, int]:
    """File -> how many times `dict[str, Any]` is written in it: annotations, casts, aliases, and
    quoted annotations (a string constant that parses as a type); prose in docstrings does not count."""
    counts: dict[str, int] = {}
    for rel, tree in _trees(root, folder):
        n = 0
        for node in ast.walk(tree):
            if _dict_str_any(node):
                n += 1
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "Any]" in node.value:
                try:
                    quoted = ast.parse(node.value, mode="eval")
                except SyntaxError:
                    continue
                n += sum(_dict_str_any(inner) for inner in ast.walk(quoted))
        if n:
            counts[rel] = n
    return counts


# What an order or a launch is called where the agent reads it: `order`, `launch`, `previous` (the
# launch it replaces), `revision`, as a name (`order["spec"]`) or an attribute (`self.launch["port"]`),
# or as a key read off another such value (`order["launch"]["port"]`: the second read is a launch's).
ORDER_NAMES = ("order", "launch", "previous", "revision")


def _order_like(node: ast.AST) -> bool:
    if _is_name(node, *ORDER_NAMES):
        return True
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value in ORDER_NAMES
        and _order_like(node.value)
    )


def string_key_reads(root: Path, folder: str = "hostagent") -> dict[str, list[str]]:
    """File -> each read of an order or a launch by a string key: a subscript with a string constant
    (`order["spec"]`, not as an assignment's target) or `.get("...")`, on a value named as in
    ORDER_NAMES. Writes (`launch["port"] = 8000`) and reads of a typed value's attributes do not count."""
    found: dict[str, list[str]] = {}
    for rel, tree in _trees(root, folder):
        reads: list[tuple[int, int, str]] = []
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)
                and _order_like(node.value)
            ) or (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and _order_like(node.func.value)
            ):
                reads.append((node.lineno, node.col_offset, ast.unparse(node)))
        if reads:
            found[rel] = [f"{line}: {text}" for line, _, text in sorted(reads)]
    return found


# --- imports hidden in functions, folders importing each other, long functions ------------------


def function_imports(root: Path) -> list[str]:
    """Import statements of first-party code inside a function (or a method) of production code,
    as 'module:line -> what'; each statement once, however many names it imports."""
    modules = _modules(root)
    first_party = {m.split(".")[0] for m in modules}
    found: list[str] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names if a.name.split(".")[0] in first_party]
                elif isinstance(node, ast.ImportFrom):
                    relative = node.level > 0
                    names = [("." * node.level) + (node.module or "")] if relative else []
                    if not relative and (node.module or "").split(".")[0] in first_party:
                        names = [node.module or ""]
                else:
                    continue
                if names:
                    found.append(f"{module}:{node.lineno} -> {', '.join(names)}")
    # A nested function's import sits inside its outer function too: count it once.
    return sorted(set(found))


def _folder(module: str, path: Path, depth: int) -> str:
    """The folder a module's file is in, `depth` parts deep at most (a package's __init__: itself)."""
    parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    return "/".join(parts[:depth])


def mutual_folders(root: Path, inside: str | None = None) -> list[str]:
    """Pairs of folders whose modules import each other, either way at module level or in a function:
    the top-level packages (inside=None), or the folders of one package (`deployments`: its own
    modules are `deployments`, those of deployments/services are `deployments/services`, and so on)."""
    modules = _modules(root)
    graph = import_graph(root)
    depth = 1 if inside is None else 2
    arrows: set[tuple[str, str]] = set()
    for module, targets in graph.items():
        if inside is not None and module.split(".")[0] != inside:
            continue
        here = _folder(module, modules[module], depth)
        for target in targets:
            if inside is not None and target.split(".")[0] != inside:
                continue
            there = _folder(target, modules[target], depth)
            if here != there:
                arrows.add((here, there))
    return sorted(f"{a} <-> {b}" for a, b in arrows if a < b and (b, a) in arrows)


LONG_FUNCTION = 80  # lines, from `def` to its last line


def long_functions(root: Path) -> list[str]:
    """Functions and methods of production code longer than LONG_FUNCTION lines, longest first,
    as 'path:line name (lines)'."""
    found: list[tuple[int, str]] = []
    for path in _production_files(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LONG_FUNCTION:
                    found.append((length, f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name} ({length})"))
    return [line for _, line in sorted(found, key=lambda f: (-f[0], f[1]))]


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
        "dict[str, Any] in hostagent/": sum(dict_str_any(root).values()),
        "string-key reads of an order or a launch, hostagent/": sum(map(len, string_key_reads(root).values())),
        "function-level first-party imports": len(function_imports(root)),
        "mutual folder pairs inside deployments/": len(mutual_folders(root, "deployments")),
        "mutual folder pairs, top level": len(mutual_folders(root)),
        f"functions over {LONG_FUNCTION} lines": len(long_functions(root)),
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
    parser.add_argument("--list", action="store_true", help="also list what the counts count")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = _checkout(args.rev, Path(tmp)) if args.rev else Path.cwd()
        for name, value in figures(root).items():
            print(f"{name:55} {value}")
        if args.list:
            print("\nimports back up the layers:", *backup_imports(import_graph(root)), sep="\n  ")
            print("\nengine-name branches:", *(f"{f}: {n}" for f, n in engine_branches(root).items()), sep="\n  ")
            print("\ndict[str, Any] in hostagent/:", *(f"{f}: {n}" for f, n in dict_str_any(root).items()), sep="\n  ")
            reads = [f"{f}:{r}" for f, rs in string_key_reads(root).items() for r in rs]
            print("\nstring-key reads of an order or a launch:", *reads, sep="\n  ")
            print("\nmutual folder pairs inside deployments/:", *mutual_folders(root, "deployments"), sep="\n  ")
            print("\nmutual folder pairs, top level:", *mutual_folders(root), sep="\n  ")
            print(f"\nfunctions over {LONG_FUNCTION} lines:", *long_functions(root), sep="\n  ")
            print("\nfunction-level first-party imports:", *function_imports(root), sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
