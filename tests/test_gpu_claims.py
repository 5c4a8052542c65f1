"""docker/ray-worker.sh under docker-compose.gpu.yml: each replica claims a different GPU for its
lifetime, and one replica too many exits with a message. Real shell and flock; `nvidia-smi` and
`ray` are stand-ins on PATH (no GPU here), so what runs is the claim logic itself."""

from __future__ import annotations

import os
import subprocess
import time

from conftest import ROOT

SCRIPT = ROOT / "docker" / "ray-worker.sh"


def _fakes(bin_dir, gpus: int) -> None:
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        + "".join(f'echo "GPU {i}: NVIDIA H100 (UUID: GPU-{i})"\n' for i in range(gpus))
    )
    ray = bin_dir / "ray"
    # What `ray start --block` would see: the GPU it may use, then it stays up like a raylet.
    ray.write_text('#!/bin/sh\necho "visible=$CUDA_VISIBLE_DEVICES args=$*"\nexec sleep 30\n')
    for f in (smi, ray):
        f.chmod(0o755)


def test_each_replica_claims_its_own_gpu_and_the_extra_one_exits(tmp_path):
    _fakes(tmp_path / "bin", gpus=2)
    claims = tmp_path / "claims"
    claims.mkdir()
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "SWEEPS_GPU_WORKERS": "1",
        "SWEEPS_GPU_CLAIMS": str(claims),
    }
    procs = []
    try:
        for _ in range(2):
            p = subprocess.Popen(
                ["sh", str(SCRIPT), "--object-store-memory=1"],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(p)
            time.sleep(0.5)  # replicas start one after the other here; flock decides anyway
        lines = [p.stdout.readline().strip() + " " + p.stdout.readline().strip() for p in procs]
        extra = subprocess.run(
            ["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30
        )
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert lines[0].startswith("ray-worker: claimed GPU 0 of 2 visible=0 args=start")
    assert lines[1].startswith("ray-worker: claimed GPU 1 of 2 visible=1 args=start")
    assert all("--num-gpus=1" in line and "--object-store-memory=1" in line for line in lines)
    assert extra.returncode == 1
    assert "all 2 GPUs are claimed" in extra.stderr
    # A dead replica's claim goes with it: the next one gets that GPU.
    again = subprocess.Popen(["sh", str(SCRIPT)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert again.stdout.readline().strip() == "ray-worker: claimed GPU 0 of 2"
    finally:
        again.kill()
        again.wait()


def test_cpu_workers_claim_nothing(tmp_path):
    _fakes(tmp_path / "bin", gpus=0)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    env.pop("SWEEPS_GPU_WORKERS", None)
    p = subprocess.Popen(["sh", str(SCRIPT)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
    finally:
        p.kill()
        p.wait()
    assert "visible= " in line and "--num-gpus=0" in line
