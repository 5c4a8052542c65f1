"""The chaos report's row for a whole Ray node lost mid-trial (the two-node cluster of
tests/test_zz_cluster.py).

    .venv/bin/python bench/chaos_report.py --only node-lost
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.chaos_common import BYO, ROOT, audit, wait_for

NODE_LOST = "node lost (worker node's `ray start` tree SIGKILLed mid-trial)"


def node_lost(base: Path) -> tuple:
    """A 2-worker trial spread over two Ray nodes; the worker node dies at epoch >= 5 of 30. It
    survives when it finishes on the head from a checkpoint (not epoch 0) with the same run."""
    sys.path.insert(0, str(ROOT / "tests"))
    import optuna
    from mlflow.tracking import MlflowClient
    from services import TwoNodes

    h = base / "node" / "home"
    h.parent.mkdir(parents=True)
    s = h.parent / "node.yaml"
    s.write_text(
        "name: node\nsearch_space: {lr: {type: float, low: 0.01, high: 0.02}}\n"
        "pruner: {name: none}\nbudget: {trials: 1}\n"
        "execution: {checkpoint_min_interval_s: 0}\n"
        "resources: {workers: 2, cpus_per_worker: 1, placement: spread, max_failures: 2}\n"
        f"trainer: {{entrypoint: 'byo_tasks:nodes_long', code_dir: '{BYO}', epochs: 30, "
        "params: {epoch_s: 0.5}}\n"
    )
    nodes = TwoNodes()
    try:
        p = nodes.run(s, h)
        url = f"sqlite:///{h}/optuna.db"

        def reached() -> bool:
            try:
                t = optuna.load_study(study_name="node", storage=url).trials
            except (KeyError, ValueError):
                return False
            return bool(t) and len(t[0].intermediate_values) >= 5

        wait_for(reached, 300)
        nodes.kill_worker_node()
        p.communicate(timeout=600)
    finally:
        nodes.stop()
    lost, left, c = audit(h, "node")
    ok = p.returncode == 0 and c.get("COMPLETE", 0) == 1
    if ok:
        (t,) = optuna.load_study(study_name="node", storage=url).trials
        run = MlflowClient(f"sqlite:///{h}/mlflow.db").get_run(t.user_attrs["mlflow_run_id"])
        ok = run.data.metrics.get("final_resumed_from", 0) >= 3
    return (NODE_LOST, 1, int(ok), lost, left)
