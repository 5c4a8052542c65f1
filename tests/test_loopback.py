"""A submitted store address that names the submitter's loopback gives way to the driver
node's own routable one: on the team stack the host's http://127.0.0.1:5000 is a published
port, and the driver on ray-head reaches MLflow as http://mlflow:5000 (its compose env). On
the same machine, or a node with no such setting, the submitted value is used. Pure."""

from __future__ import annotations

from sweeps.common.loopback import apply, is_loopback


def test_the_nodes_own_store_wins_over_a_submitted_loopback_address():
    submitted = {
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000",
        "SWEEPS_STORAGE": "postgresql+psycopg://sweeps:pw@localhost:5432/optuna",
        "MLFLOW_TRACKING_USERNAME": "carol",
        "SWEEPS_CHECKPOINTS": "/shared/checkpoints",
        "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9023",
    }
    node = {
        "MLFLOW_TRACKING_URI": "http://mlflow:5000",
        "SWEEPS_STORAGE": "postgresql+psycopg://sweeps:pw@postgres:5432/optuna",
    }
    said: list[str] = []
    apply(submitted, node, said.append)
    assert node["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert node["SWEEPS_STORAGE"].endswith("@postgres:5432/optuna")
    assert node["MLFLOW_TRACKING_USERNAME"] == "carol"
    assert node["STORAGE_EMULATOR_HOST"] == "http://127.0.0.1:9023"  # the node has none: used
    assert said == [
        "the submitter's loopback address is not this node's: using "
        "MLFLOW_TRACKING_URI=http://mlflow:5000, "
        "SWEEPS_STORAGE=postgresql+psycopg://sweeps:***@postgres:5432/optuna"
    ]


def test_on_the_same_machine_the_submitted_value_is_used():
    node = {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5999"}
    said: list[str] = []
    apply({"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}, node, said.append)
    assert node == {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"} and not said
    assert not is_loopback("sqlite:///x.db") and not is_loopback("http://[bad")
