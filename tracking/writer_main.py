"""The tracker's writer process, as the local service's zygote forks it (tracking.writer_fork).

python -m tracking.writer_main SYS_PATH_JSON URI ARTIFACT_ROOT   (run in the zygote's fork)
"""

from __future__ import annotations

import contextlib
import json
import os
import sys


def main(argv: list[str]) -> None:
    # Out of the zygote's process group, as the Popen'd writer is out of the driver's: it
    # writes what it was sent until the driver closes the pipe, whatever signals the group.
    with contextlib.suppress(OSError):
        os.setsid()
    sys.path[:] = json.loads(argv[0])
    from sweeps.common.quietlogs import quiet

    quiet()
    from tracking.tracker import MLflowTracker
    from tracking.writer_proc import child_main

    child_main(MLflowTracker, argv[1], argv[2])


if __name__ == "__main__":
    main(sys.argv[1:])
