"""Who the MLflow server says the caller is: on the team stack, a sweep's owner is the MLflow
basic-auth user, and `submit` checks the credentials with the server before it names them.

MLflow's basic-auth app answers `GET /api/2.0/mlflow/users/current` for any user it
authenticates (MLflow 3's `mlflow.server.auth.routes.GET_CURRENT_USER`); a server without
basic-auth has no such route.
"""

from __future__ import annotations

from sweeps.common.errors import ServiceError, SpecError, one_line

CURRENT_USER = "/api/2.0/mlflow/users/current"


def checked_user(uri: str, user: str | None, password: str | None) -> str | None:
    """The basic-auth user these credentials are, as the server at `uri` says; None where the
    URI is not HTTP, no user is given, or the server has no basic-auth. Wrong credentials are a
    SpecError (exit 2); a server that cannot be reached is a ServiceError."""
    if not user or not uri.startswith(("http://", "https://")):
        return None
    import requests

    try:
        r = requests.get(uri.rstrip("/") + CURRENT_USER, auth=(user, password or ""), timeout=10)
    except requests.RequestException as e:
        raise ServiceError(f"MLflow at {uri} did not answer: {one_line(e)}") from None
    if r.status_code in (401, 403):
        raise SpecError(
            f"MLflow at {uri} refused user {user!r}: check MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD"
        )
    if r.status_code == 404:
        return None  # no basic-auth on that server: the name is taken as given
    try:
        r.raise_for_status()
        return str(r.json()["user"]["username"])
    except (requests.RequestException, ValueError, KeyError, TypeError) as e:
        raise ServiceError(f"MLflow at {uri}: no user in its answer: {one_line(e)}") from None
