"""Reports with cloudml-hypertune, as an AI Platform module would."""

import argparse

import hypertune

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
args, _ = p.parse_known_args()
hpt = hypertune.HyperTune()
for epoch in range(1, args.epochs + 1):
    hpt.report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag="accuracy", metric_value=epoch / 10, global_step=epoch
    )
