"""One registry of names (`sweeps.common.names`): no other module spells out a name sweeps
writes into Optuna or MLflow, or a module path that no import shows, and every module path it
names exists (a moved module would otherwise fail only when a worker or the zygote imports it)."""

from __future__ import annotations

import ast
import importlib.util
import re

from conftest import ROOT

from sweeps.common import names

PACKAGES = ("sweeps", "trainer", "tracking")
REGISTRY = ROOT / "sweeps" / "common" / "names.py"
# A string that starts with a name of ours, or quotes one inside it (an MLflow search filter).
SPELLED = re.compile(r"(^|[`'\"])sweeps\.\w")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def test_no_sweeps_name_is_spelled_outside_the_registry():
    found = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if path == REGISTRY:
                continue
            tree = ast.parse(path.read_text())
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docs
                    and SPELLED.search(node.value)
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}")
    assert not found, "\n".join(found)


def test_the_check_above_sees_plain_strings_and_f_strings():
    code = 'a = "sweeps.state"\nb = f"sweeps.driver.{x}"\nc = f"tags.`sweeps.study` = 1"\n'
    hits = [
        n.value
        for n in ast.walk(ast.parse(code))
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and SPELLED.search(n.value)
    ]
    assert len(hits) == 3


def test_every_name_is_one_of_a_kind():
    values = [v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)]
    assert len(values) == len(set(values))


def _module_paths() -> list[str]:
    refs = [v for k, v in vars(names).items() if k.endswith(("_ENTRYPOINT", "_MODULE"))]
    return refs + list(names.DRIVER_WARM_MODULES) + list(names.LEGACY_ENTRYPOINTS.values())


def test_every_module_the_registry_names_exists_with_its_function():
    assert len(_module_paths()) >= 8
    for ref in _module_paths():
        module, _, fn = ref.partition(":")
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, f"{ref}: no such module"
        if fn:
            tree = ast.parse(open(spec.origin).read())
            defined = {
                n.name
                for n in tree.body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            }
            assert fn in defined, f"{ref}: {module} defines no {fn}"


def test_entry_points_stored_by_earlier_releases_resolve_to_where_they_live_now():
    assert names.entrypoint("sweeps.program:run_program") == names.PROGRAM_ENTRYPOINT
    assert names.entrypoint("sweeps.aiplatform:run_module") == names.AIPLATFORM_ENTRYPOINT
    assert names.entrypoint("mypkg.task:main") == "mypkg.task:main"


CODE_IN_STRING = re.compile(r"\b(?:from|import)\s+((?:sweeps|trainer|tracking)(?:\.\w+)+)")


def test_code_run_from_a_string_imports_modules_that_exist():
    """A child process's boot line (`python -c "from sweeps... import ..."`) is a string."""
    found = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text())
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if id(node) not in docs:
                        found += [(path, m) for m in CODE_IN_STRING.findall(node.value)]
    assert found, "the writer process's boot line names a module"
    for path, module in found:
        assert importlib.util.find_spec(module) is not None, f"{path}: no module {module}"
