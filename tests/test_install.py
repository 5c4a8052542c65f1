"""Install metadata: ranges in pyproject.toml, exact pins in constraints.txt (issue 17, item 16).

A user's own torch (say a CUDA build) must survive `pip install sweeps`; the exact versions we
test with live in constraints.txt, which the README's commands and CI pass with `-c`.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements() -> list[Requirement]:
    project = _pyproject()["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project.get("optional-dependencies", {}).values():
        reqs += [Requirement(r) for r in extra]
    return reqs


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def test_dependencies_are_ranges_not_pins():
    deps = {
        canonicalize_name(Requirement(r).name): Requirement(r)
        for r in _pyproject()["project"]["dependencies"]
    }
    for name, req in deps.items():
        assert not any(s.operator in ("==", "===") for s in req.specifier), f"{name} is pinned"
    assert str(deps["torch"].specifier) == ">=2.4"
    assert str(deps["torchvision"].specifier) == ">=0.19"
    # a user's CUDA build of an older-but-supported torch satisfies the range
    assert deps["torch"].specifier.contains("2.5.1+cu124")


def test_constraints_pin_every_dependency_within_its_range():
    pins = _pins()
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"constraints.txt has no pin for {name}"
        assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name])
    assert pins["torch"] == "2.14.1" and pins["torchvision"] == "0.29.1"


def test_readme_and_ci_install_with_the_constraints():
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)```", readme, re.S).group(1).strip().splitlines()
    assert len(first) == 2
    for cmd in first:
        assert "pip install" in cmd and "-c constraints.txt" in cmd, cmd
    ci = (ROOT / ".ci" / "run").read_text()
    install = [ln for ln in ci.splitlines() if "pip install" in ln and not ln.startswith("#")]
    assert install and all("-c constraints.txt" in ln for ln in install)
    # the CPU-only recipe names the same torch versions as the constraints
    pins = _pins()
    assert f"torch=={pins['torch']}" in readme and f"torchvision=={pins['torchvision']}" in readme
    assert "download.pytorch.org/whl/cpu" in readme
