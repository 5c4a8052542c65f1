"""The package's shape, checked from the source: no import cycles (imports inside functions
count), lower layers never import upper ones, no module over 400 lines, and the private names
of Optuna and MLflow used from one adapter module each."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

PACKAGES = ("sweeps", "trainer", "tracking")

# Lowest first. A module may import its own layer and those below, never above.
LAYERS = [
    (
        "base",
        {
            "sweeps.errors",
            "sweeps.protocol",
            "sweeps.paths",
            "sweeps.redact",
            "sweeps.runtime",
            "sweeps.space",
            "sweeps.callbacks",
            "sweeps.timeline",
            "sweeps.userlog",
        },
        ("sweeps.spec",),
    ),
    ("workers", set(), ("trainer", "tracking")),
    ("driver", set(), ("sweeps",)),  # every other sweeps.* module
    ("api", {"sweeps", "sweeps.api", "sweeps.queries", "sweeps.jobs", "sweeps.notebook"}, ()),
    ("cli", set(), ("sweeps.cli",)),
]


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(path: Path, known: set[str]) -> set[str]:
    """Modules of ours that `path` imports, at any depth (functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import mod` depends on pkg.mod; `from pkg import name`, on pkg.
            subs = [f"{node.module}.{a.name}" for a in node.names]
            names = [n for n in subs if n in known] or [node.module]
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n:
                found.add(n)
    return found


def _layer(module: str) -> int:
    """The layer naming the module exactly, else the one with the longest matching prefix."""
    for i, (_, exact, _prefixes) in enumerate(LAYERS):
        if module in exact:
            return i
    best = max(
        (
            (len(p), i)
            for i, (_, _, ps) in enumerate(LAYERS)
            for p in ps
            if module == p or module.startswith(p + ".")
        ),
        default=None,
    )
    assert best is not None, f"no layer for {module}"
    return best[1]


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    graph = {}
    for name, path in mods.items():
        deps = _imports(path, known) - {name}
        # A package's __init__ importing its submodules (re-exports) is not a dependency of
        # those submodules on the package.
        deps = {d for d in deps if not name.startswith(d + ".")}
        graph[name] = deps
    return graph


def test_no_import_cycles():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_lower_layers_never_import_upper_ones():
    bad = []
    for mod, deps in _graph().items():
        for dep in deps:
            if _layer(dep) > _layer(mod):
                bad.append(
                    f"{mod} ({LAYERS[_layer(mod)][0]}) imports {dep} ({LAYERS[_layer(dep)][0]})"
                )
    assert not bad, "\n".join(sorted(bad))


def test_no_module_over_400_lines():
    long = {n: len(p.read_text().splitlines()) for n, p in _modules().items()}
    assert not {n: k for n, k in long.items() if k > 400}


def test_private_names_of_optuna_and_mlflow_live_in_their_adapters():
    optuna_private = re.compile(
        r"\._storage\b|\._study_id\b|\._trial_id\b|_thread_local|_stop_flag|\._contains\("
        r"|\._backend\b"
    )
    mlflow_private = re.compile(r"mlflow\.[\w.]*\._\w+|_tracking_service|mlflow\.system_metrics\b")
    seen_optuna, seen_mlflow = set(), set()
    for name, path in _modules().items():
        text = path.read_text()
        if optuna_private.search(text):
            seen_optuna.add(name)
        if mlflow_private.search(text):
            seen_mlflow.add(name)
    assert seen_optuna == {"sweeps.study"}, seen_optuna
    assert seen_mlflow == {"tracking.mlflow_compat"}, seen_mlflow
