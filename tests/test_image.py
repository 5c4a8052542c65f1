"""Trials in a container image (`resources.image`, Ray's image_uri): the spec, the workers'
runtime env, warm-lane keys (pure), and the podman check on a real local Ray."""

from __future__ import annotations

import shutil

import optuna
import pytest
from conftest import make_spec

from sweeps import api
from sweeps.common.errors import ServiceError, SpecError
from sweeps.execution import cluster
from sweeps.execution.lane import LaneShape
from sweeps.spec import spec_from_dict


def test_an_image_goes_to_the_workers_runtime_env_and_keys_its_lanes(tmp_path):
    spec = make_spec(resources={"image": "reg/train:1"})
    _, lane = cluster.runtime_env(spec)
    assert lane["image_uri"] == "reg/train:1"
    # Ray takes image_uri with env_vars only: no working dir, no host path on PYTHONPATH.
    assert set(lane) == {"image_uri", "env_vars"} and "PYTHONPATH" not in lane["env_vars"]
    shape = LaneShape.of(1, 1, 0)
    plain = cluster.lane_key(make_spec(), shape, str(tmp_path))
    one = cluster.lane_key(spec, shape, str(tmp_path))
    other = cluster.lane_key(make_spec(resources={"image": "reg/train:2"}), shape, str(tmp_path))
    assert len({plain, one, other}) == 3, "a warm lane runs only the image it was started in"


def test_an_image_with_a_host_code_dir_is_named(tmp_path):
    with pytest.raises(SpecError, match=r"resources.image: .*drop trainer.code_dir"):
        make_spec(
            resources={"image": "reg/train:1"},
            trainer={"entrypoint": "task:train", "code_dir": str(tmp_path)},
        )
    with pytest.raises(SpecError, match="resources.image"):
        spec_from_dict({**make_spec().model_dump(), "resources": {"image": "two words"}})


def test_an_image_sweep_checkpoints_outside_its_containers():
    cluster.check_image_storage("gs://bucket/ckpt", local_mode=False)
    for local in ("/home/me/.sweeps/checkpoints", "file:///srv/ckpt"):
        with pytest.raises(SpecError, match=r"resources.image: .*inside each worker's container"):
            cluster.check_image_storage(local, local_mode=False)
    with pytest.raises(SpecError, match="local-mode"):
        cluster.check_image_storage("gs://bucket/ckpt", local_mode=True)


@pytest.mark.usefixtures("ray_cluster")
def test_a_node_without_podman_stops_an_image_sweep_before_any_trial(home, monkeypatch):
    spec = make_spec(name="img", resources={"image": "sweeps-test/none:1"})
    monkeypatch.setenv("SWEEPS_CHECKPOINTS", "gs://never-written/ckpt")
    if shutil.which("podman") is not None:  # a node that has it, but cannot get the image
        with pytest.raises(ServiceError, match=r"sweeps-test/none:1 cannot be started on node"):
            cluster.check_image_nodes(spec)
    # The node is asked for the tool by name: one no node has stands for a node without podman.
    monkeypatch.setattr(cluster, "CONTAINER_TOOL", "podman-not-on-this-node")
    with pytest.raises(ServiceError) as e:
        api.run(spec, install_signals=False)
    msg = str(e.value)
    assert "\n" not in msg and "podman-not-on-this-node" in msg and "sweeps-test/none:1" in msg
    storage = f"sqlite:///{home}/optuna.db"
    names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    assert "img" not in names, "a sweep that never started leaves no study behind"
