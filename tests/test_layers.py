"""The package's shape, checked from the source: no import cycles (imports inside functions
count), lower layers never import upper ones, no module over 400 lines, and the private names
of Optuna and MLflow used from one adapter module each."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

PACKAGES = ("sweeps", "trainer", "tracking")

# Lowest first: a module may import its own layer and those below, never above. A module belongs
# to the layer with the longest prefix of its name; docs/ARCHITECTURE.md lists the same layers.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("common", ("sweeps.common",)),
    ("spec", ("sweeps.spec",)),
    ("contracts", ("sweeps.contracts",)),
    ("worker", ("sweeps.worker",)),
    ("trainer, tracking", ("trainer", "tracking")),
    ("search", ("sweeps.search",)),
    ("service", ("sweeps.service",)),
    ("execution", ("sweeps.execution",)),
    ("importers", ("sweeps.importers",)),
    ("driver", ("sweeps.driver",)),
    ("entry points", ("sweeps",)),
    ("cli", ("sweeps.cli",)),
]
ENTRY_POINTS = {
    "sweeps",
    "sweeps.api",
    "sweeps.notebook",
    "sweeps.objectives",
    "sweeps.queries",
    "sweeps.jobs",
    "sweeps.doctor",
}


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
    """The layer with the longest prefix of the module's name."""
    best = max(
        (
            (len(p), i)
            for i, (_, ps) in enumerate(LAYERS)
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
        # A submodule importing its parent package counts: `import sweeps` in a lower layer
        # runs the whole package's __init__.
        graph[name] = _imports(path, known) - {name}
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


def test_no_function_over_80_lines():
    long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    long.append(f"{name}.{node.name}: {n} lines")
    assert not long, long


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
    # study: the adapter; bulk: its bulk reads of Optuna's tables (study.py is at 400 lines).
    assert seen_optuna <= {"sweeps.search.study", "sweeps.search.bulk"}, seen_optuna
    assert seen_mlflow == {"tracking.mlflow_compat"}, seen_mlflow


def test_every_stage_is_a_subpackage_and_only_entry_points_stay_at_the_top():
    top = {n for n in _modules() if n.count(".") == 1 and n.startswith("sweeps.")}
    packages = {n for n, p in _modules().items() if p.name == "__init__.py"}
    assert {n for n in top if n not in packages} | {"sweeps"} == ENTRY_POINTS


def test_every_subpackage_says_what_it_owns_and_may_import():
    for name, path in _modules().items():
        if path.name != "__init__.py" or name in PACKAGES:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert "May import" in doc, f"{name}/__init__.py: say what it owns and what it may import"


def test_architecture_doc_lists_the_same_layers():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\d+\. \*\*(.+?)\*\*", section, flags=re.M)
    assert listed == [name for name, _ in LAYERS]
