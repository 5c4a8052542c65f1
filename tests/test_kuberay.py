"""deploy/kuberay/: the RayCluster validates against KubeRay's own CRD schema (v1.7.0, vendored
under tests/data), and has the shape the team stack needs. No Kubernetes runs here: what a real
cluster would add (scheduling, the RWX storage class, the operator's defaulting) is untested."""

from __future__ import annotations

import gzip
import json
from importlib.metadata import version

import jsonschema
import pytest
import yaml
from conftest import ROOT

KUBERAY = ROOT / "deploy" / "kuberay"
SCHEMA = ROOT / "tests" / "data" / "kuberay-v1.7.0-raycluster-v1.schema.json.gz"


def _schema() -> dict:
    with gzip.open(SCHEMA) as f:
        return json.load(f)


def _cluster() -> dict:
    return yaml.safe_load((KUBERAY / "raycluster.yaml").read_text())


def _pods(rc: dict) -> list[tuple[str, dict]]:
    groups = [("head", rc["spec"]["headGroupSpec"])]
    groups += [(g["groupName"], g) for g in rc["spec"]["workerGroupSpecs"]]
    return [(name, g["template"]["spec"]) for name, g in groups]


def test_raycluster_validates_against_the_kuberay_crd_schema():
    rc = _cluster()
    assert (rc["apiVersion"], rc["kind"]) == ("ray.io/v1", "RayCluster")
    jsonschema.validate(rc, _schema(), cls=jsonschema.Draft7Validator)


@pytest.mark.parametrize(
    "path, value",
    [
        (("spec", "authOptions", "mode"), "password"),
        (("spec", "workerGroupSpecs", 0, "maxReplicas"), "many"),
        (
            (
                "spec",
                "workerGroupSpecs",
                1,
                "template",
                "spec",
                "containers",
                0,
                "resources",
                "limits",
                "nvidia.com/gpu",
            ),
            "one GPU",
        ),  # fmt: skip
    ],
)
def test_the_schema_check_catches_a_broken_manifest(path, value):
    rc = _cluster()
    node = rc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rc, _schema(), cls=jsonschema.Draft7Validator)


def test_head_runs_drivers_cpu_and_gpu_groups_run_trials_on_shared_storage():
    rc = _cluster()
    spec = rc["spec"]
    assert spec["rayVersion"] == version("ray")
    assert spec["authOptions"]["mode"] == "token"
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    assert set(groups) == {"cpu", "gpu"}
    gpu_limits = groups["gpu"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu_limits["nvidia.com/gpu"] == "1"
    assert groups["cpu"]["rayStartParams"]["num-gpus"] == "0"
    claim = yaml.safe_load((KUBERAY / "storage.yaml").read_text())
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    images = set()
    for name, pod in _pods(rc):
        (container,) = pod["containers"]
        images.add(container["image"])
        vols = {v["name"]: v for v in pod["volumes"]}
        assert vols["shared"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
        assert {"name": "shared", "mountPath": "/shared"} in container["volumeMounts"], name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["SWEEPS_CHECKPOINTS"] == "/shared/checkpoints", name
        # Store credentials only where drivers run.
        assert ("envFrom" in container) == (name == "head"), name
    assert len(images) == 1
