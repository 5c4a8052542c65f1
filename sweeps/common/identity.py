"""Who is asking: the owner a sweep is recorded with, and whom `stop`/`cancel` check.

On the local service it is the OS user. On the team stack it is the MLflow basic-auth user
(MLFLOW_TRACKING_USERNAME), whose password the MLflow server checks at submit. A submitted
driver runs as whoever holds the Ray token; it takes the owner its submitter passed
(OWNER_ENV), so the trust boundary is the Ray token: its holder is a cluster admin.
"""

from __future__ import annotations

import getpass
import os

OWNER_ENV = "SWEEPS_OWNER"  # set by `submit` for its driver only


def caller() -> str:
    """The user this process acts for."""
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    if user:
        return user
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user with no passwd entry
        return f"uid{os.getuid()}"


def owner() -> str:
    """The owner a sweep started by this process gets: its submitter's, in a driver."""
    return os.environ.get(OWNER_ENV) or caller()
