"""The built-in model's MLflow folder: its fixed part written by a forked child during a lane's
warm-up, then used for every trial's model."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

# Run as a fresh process: the parent must never import MLflow itself, so the template it uses
# can only be the child's; the packaged model is then loaded and run as a registry user would.
SCRIPT = r"""
import io, sys, tarfile, tempfile
import numpy as np, torch
from trainer import packaging as pk
from trainer.data import input_scaling
from trainer.models import build_model

meta = {"sweeps.dataset": "digits", "sweeps.input_scaling": input_scaling("digits")}
example = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
join = pk.template_in_child((1, 8, 8), 10, example, meta)
join()
assert pk._key((1, 8, 8), 10, meta) in pk._TEMPLATES, "the child wrote the template"
assert "mlflow" not in sys.modules, "the parent never imported MLflow"
torch.manual_seed(0)
model = build_model("mlp", (1, 8, 8), 10, hidden=16, layers=1)
arch = {"hidden": 16, "layers": 1}
info = {"model": "mlp", "arch": arch, "input_shape": [1, 8, 8], "num_classes": 10}
blob = pk.package_builtin(model, info, example, meta)
assert "mlflow" not in sys.modules, "packaging a trial's model needs only the template"
out = tempfile.mkdtemp()
tarfile.open(fileobj=io.BytesIO(blob)).extractall(out)
import mlflow
loaded = mlflow.pyfunc.load_model(out + "/model")
got = loaded.predict(example)
with torch.no_grad():
    want = model(torch.from_numpy(example)).numpy()
assert np.allclose(got, want, atol=1e-6), (got, want)
print("ok")
"""


def test_a_template_written_by_a_forked_child_packages_a_loadable_model():
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
