"""Whether the nodes can run a sweep's container image (`resources.image`, Ray's image_uri),
asked before any lane starts. Without the check, each lane's start fails deep in Ray's runtime
env agent, five lanes over, and the sweep ends on a traceback cut mid-line.

`node_check` runs on each node (a zero-CPU Ray task pinned there); `refusal` turns the nodes'
answers into the one line the sweep stops with, naming what runs it without the image.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sweeps.spec import Spec

# A node pulls a missing image once, as the first worker Ray starts there would (podman run's
# default): the check waits as long as that pull may take.
PULL_TIMEOUT_S = 600


def node_check(tool: str, image: str) -> str:
    """On a node: '' when `tool` can start `image` here (in the node's store, or pulled now),
    else why not in a few words ('no TOOL' when the node has none)."""
    import shutil
    import subprocess

    exe = shutil.which(tool)
    if exe is None:
        return f"no {tool}"
    if subprocess.run([exe, "image", "exists", image], capture_output=True).returncode == 0:
        return ""
    try:
        r = subprocess.run(
            [exe, "pull", "-q", image], capture_output=True, text=True, timeout=PULL_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return f"`{tool} pull {image}` took over {PULL_TIMEOUT_S} s"
    if r.returncode == 0:
        return ""
    lines = (r.stderr or r.stdout or "").strip().splitlines()
    return f"{tool} cannot get it: {lines[-1] if lines else f'exit {r.returncode}'}"[:400]


def refusal(spec: Spec, tool: str, answers: dict[str, str]) -> str:
    """The one line a sweep stops with when some node (address -> `node_check`'s answer)
    cannot run its image; '' when every node can."""
    image = spec.resources.image
    missing = sorted(a for a, why in answers.items() if why == f"no {tool}")
    if missing:
        return (
            f"resources.image: Ray runs {image} with {tool}, and node(s) {', '.join(missing)} "
            f"have none: install {tool} on every node that runs trials, {without_image(spec)}"
        )
    failing = sorted(a for a, why in answers.items() if why)
    if failing:
        return (
            f"resources.image: {image} cannot be started on node(s) {', '.join(failing)} "
            f"({answers[failing[0]]}): put it in each node's {tool} store, {without_image(spec)}"
        )
    return ""


def without_image(spec: Spec) -> str:
    """How the sweep runs where no image can: an AI Platform job's shipped package on the
    cluster's own Python (--cluster-python), else with no image at all."""
    from sweeps.common import names

    t = spec.trainer
    if t.entrypoint == names.AIPLATFORM_ENTRYPOINT and t.params.get("package_archive"):
        return "or run it with --cluster-python: the package on this cluster's own Python"
    return "or drop the image"
