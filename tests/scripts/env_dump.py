"""Writes its argv and environment into the trial dir, prints one metric, leaves a file."""

import json
import os
import sys

out = os.environ["SWEEPS_TRIAL_DIR"]
keys = [k for k in os.environ if k.startswith(("AIP_", "CLOUD_ML_", "SWEEPS_", "OMP_", "MKL_"))]
keys += ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"]
info = {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": {k: os.environ.get(k) for k in keys}}
if "--params" in sys.argv:
    with open(sys.argv[sys.argv.index("--params") + 1]) as f:
        info["params_file"] = json.load(f)
with open(os.path.join(out, "info.json"), "w") as f:
    json.dump(info, f)
print(f"score={len(sys.argv)}")
