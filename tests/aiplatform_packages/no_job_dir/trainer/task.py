"""A trainer with no --job-dir flag: argparse rejects any flag it does not know. It saves its
model where Vertex says, AIP_MODEL_DIR."""

import argparse
import json
import os

import hypertune


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--alpha", type=float, required=True)
    args = parser.parse_args()
    score = 1.0 - abs(args.alpha - 0.5)
    hypertune.HyperTune().report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag="score", metric_value=score, global_step=1
    )
    model_dir = os.environ["AIP_MODEL_DIR"]
    os.makedirs(model_dir, exist_ok=True)
    seen = {k: os.environ.get(k) for k in ("TF_CONFIG", "CLOUD_ML_TRIAL_ID", "AIP_MODEL_DIR")}
    with open(os.path.join(model_dir, "seen.json"), "w") as f:
        json.dump(seen, f)


if __name__ == "__main__":
    main()
