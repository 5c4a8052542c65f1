"""An AI Platform job with `--master-image-uri` and `--package-path` (issue 28, item 2), the
parts that need no image: the package shipped to the image unpacks on the image's Python (the
CI image's is Debian 12's 3.11.2, older than tarfile's extraction filters), and where no image
can be run (no podman on a node, or an image it cannot get), one line says so, naming
`--cluster-python`. The run in the image itself is tests/e2e/test_image_trial.py."""

from __future__ import annotations

import base64
import io
import shutil
import tarfile
import uuid

import pytest
from conftest import ROOT, make_spec

from sweeps.common.errors import ServiceError
from sweeps.execution import cluster, images
from sweeps.importers.aiplatform import load_config, to_spec
from sweeps.spec import spec_from_dict
from sweeps.worker import cloudml

PACKAGE = ROOT / "tests" / "aiplatform_packages" / "image_job"


def _image_job(cluster_python: bool = False, image: str = "reg/train:7"):
    config = load_config(PACKAGE / "hptuning_config.yaml")
    config["trainingInput"]["masterConfig"] = {"imageUri": image}
    raw, _ = to_spec(
        config,
        name="img",
        package_path=str(PACKAGE),
        module_name="trainer.task",
        cluster_python=cluster_python,
    )
    return spec_from_dict(raw)


@pytest.fixture
def python_3_11_2(monkeypatch):
    """tarfile as Python before 3.11.4 has it: no `filter` argument, no data_filter."""
    real = tarfile.TarFile.extractall

    def extractall(self, path=".", members=None, *, numeric_owner=False):
        return real(self, path, members, numeric_owner=numeric_owner, filter="fully_trusted")

    monkeypatch.delattr(tarfile, "data_filter")
    monkeypatch.setattr(tarfile.TarFile, "extractall", extractall)


@pytest.mark.usefixtures("python_3_11_2")
def test_the_shipped_package_unpacks_on_a_python_without_tar_filters(tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(PACKAGE, pkg)
    (pkg / "trainer" / "stamp.txt").write_text(uuid.uuid4().hex)  # content of its own: not cached
    root = cloudml.unpack(cloudml.archive(pkg))
    assert (root / "trainer" / "task.py").read_bytes() == (pkg / "trainer" / "task.py").read_bytes()
    assert (root / "deps" / "cloudml-hypertune-0.1.0.dev6.tar.gz").is_file()
    # What the "data" filter refuses is refused here too: nothing lands outside the folder.
    for bad in ("../escaped.txt", "/tmp/absolute.txt"):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo(bad)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"x\n"))
            tar.addfile(tarfile.TarInfo(uuid.uuid4().hex), io.BytesIO(b""))
        with pytest.raises(ValueError, match="not a plain file"):
            cloudml.unpack(base64.b64encode(buf.getvalue()).decode())


def test_where_no_node_can_run_the_image_the_line_names_cluster_python():
    job, plain = _image_job(), make_spec(resources={"image": "reg/train:7"})
    assert images.refusal(job, "podman", {"10.0.0.1": "", "10.0.0.2": ""}) == ""
    line = images.refusal(job, "podman", {"10.0.0.1": "", "10.0.0.2": "no podman"})
    assert "node(s) 10.0.0.2 have none" in line and line.endswith(
        "or run it with --cluster-python: the package on this cluster's own Python"
    )
    line = images.refusal(plain, "podman", {"10.0.0.1": "podman cannot get it: Error: x"})
    assert "reg/train:7 cannot be started on node(s) 10.0.0.1 (podman cannot get it" in line
    assert line.endswith("or drop the image")  # a native sweep has no package to run without


@pytest.mark.usefixtures("ray_cluster")
def test_a_cluster_without_podman_stops_the_image_job_with_one_line(monkeypatch):
    # The nodes are asked for the tool by name: one no node has stands for one without podman.
    monkeypatch.setattr(cluster, "CONTAINER_TOOL", "podman-not-on-this-node")
    with pytest.raises(ServiceError) as e:
        cluster.check_image_nodes(_image_job())
    msg = str(e.value)
    assert "\n" not in msg and "reg/train:7" in msg and "podman-not-on-this-node" in msg
    assert "--cluster-python" in msg, msg
    # --cluster-python itself: no image, so nothing of this check applies.
    job = _image_job(cluster_python=True)
    assert job.resources.image is None and job.trainer.code_dir == str(PACKAGE)


@pytest.mark.usefixtures("ray_cluster")
def test_an_image_no_node_can_get_stops_the_image_job_with_one_line():
    job = _image_job(image="localhost/sweeps-test-none:1")  # no registry answers there
    with pytest.raises(ServiceError) as e:
        cluster.check_image_nodes(job)
    msg = str(e.value)
    assert "\n" not in msg and "--cluster-python" in msg, msg
    if shutil.which("podman") is not None:  # else the line above says the node has no podman
        assert "localhost/sweeps-test-none:1 cannot be started on node" in msg, msg
        assert "(podman cannot get it: " in msg, msg
