"""Print the image's requirements, one per line, from pyproject.toml alone (dependencies plus the
extras named on the command line), so the Dockerfile installs them in a layer that a source
change does not invalidate. Usage: python3 deps.py PYPROJECT [EXTRA ...]"""

import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
reqs = list(project["dependencies"])
for extra in sys.argv[2:]:
    reqs += project["optional-dependencies"][extra]
# The package itself is installed with --no-build-isolation: its build backend comes from here.
reqs += ["setuptools>=68", "wheel"]
print("\n".join(reqs))
