"""Issue 32 #5: a trial's model is its best checkpoint (`tracking.model: best`, the default),
logged as an MLflow 3 LoggedModel with that epoch's step and metrics; `last` keeps the weights
the trial ended with."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_spec
from mlflow.tracking import MlflowClient

from sweeps import api
from sweeps.common.errors import SpecError
from sweeps.driver.trial_config import trainer_settings
from sweeps.spec.model_pick import check_model_pick, model_pick
from trainer.best import BestKeeper


def test_model_pick_resolves_best_where_an_epoch_can_be_picked_and_rejects_it_elsewhere():
    assert model_pick(make_spec()) == ("val_accuracy", "maximize")
    assert trainer_settings(make_spec()).model_metric == "val_accuracy"
    lossy = make_spec(objective={"metric": "val_loss", "direction": "minimize"})
    assert trainer_settings(lossy).model_direction == "minimize"
    assert model_pick(make_spec(tracking={"model": "last"})) is None
    assert trainer_settings(make_spec(tracking={"model": "last"})).model_metric is None
    # Unset, where no epoch can be picked: the last weights, as before.
    costly = make_spec(objective={"metric": "train_seconds", "direction": "minimize"})
    assert model_pick(costly) is None
    check_model_pick(costly)
    # Asked for where it cannot be done: one line, exit 2.
    for spec, why in (
        (make_spec(tracking={"model": "best", "log_models": False}), "no model is logged"),
        (
            make_spec(
                objective={"metric": "train_seconds", "direction": "minimize"},
                tracking={"model": "best"},
            ),
            "'train_seconds' is not reported each epoch",
        ),
        (
            make_spec(
                trainer={"entrypoint": "pkg.mod:train", "epochs": 2}, tracking={"model": "best"}
            ),
            "your code hands back its own model",
        ),
    ):
        with pytest.raises(SpecError, match=why) as e:
            check_model_pick(spec)
        assert e.value.exit_code == 2 and "\n" not in str(e.value)
    with pytest.raises(SpecError, match="tracking.model"):
        api.validate_spec(make_spec(tracking={"model": "last", "log_models": False}))
    with pytest.raises(SpecError, match="tracking.model: unknown value 'first'"):
        make_spec(tracking={"model": "first"})


def test_best_keeper_keeps_the_best_epochs_weights_across_a_checkpoint(tmp_path):
    net = torch.nn.Linear(3, 2)
    keeper = BestKeeper("acc", "maximize", rank=0)
    seen = {}
    for step, acc in enumerate([0.5, 0.8, 0.7, float("nan"), 0.8], start=1):
        with torch.no_grad():
            net.weight.fill_(float(step))  # weights that say which epoch they are from
        keeper.offer({"acc": acc, "loss": 1.0 / step}, net, step)
        seen[step] = keeper.step
    assert seen == {1: 1, 2: 2, 3: 2, 4: 2, 5: 2}  # a tie keeps the earlier epoch; NaN never wins
    keeper.save(str(tmp_path))
    again = BestKeeper("acc", "maximize", rank=0)
    again.resume(str(tmp_path))  # a restarted worker group
    picked = again.restore(net)
    assert picked == {"step": 2, "metrics": {"acc": 0.8, "loss": 0.5}}
    assert torch.equal(net.weight, torch.full((2, 3), 2.0))
    low = BestKeeper("loss", "minimize")
    for step, loss in enumerate([0.9, 0.3, 0.6], start=1):
        low.offer({"loss": loss}, net, step)
    assert low.step == 2
    # Rank 1 keeps nothing (DDP: rank 0's copy is the model); `last` keeps nothing either.
    for idle in (BestKeeper("acc", rank=1), BestKeeper(None)):
        idle.offer({"acc": 1.0}, net, 1)
        assert idle.restore(net) is None


def test_model_metrics_are_the_runs_points_at_its_step_without_a_second_point(tmp_path):
    """What mlflow.log_model(step=S) does: the run's metrics at S linked to the model."""
    from mlflow.entities import LoggedModelStatus

    from tracking.model_log import _metrics_at, model_value

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("e")
    run = client.create_run(exp).info.run_id
    for step, acc in ((1, 0.9), (2, 0.6)):
        client.log_metric(run, "val_accuracy", acc, timestamp=1000 + step, step=step)
    model = client.create_logged_model(exp, name="model", source_run_id=run)
    client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    kw = {"model_id": model.model_id}
    items = _metrics_at(client, run, 1, {"val_accuracy": 0.9, "epoch": 1.0}, 5000, kw)
    client.log_batch(run, metrics=items)
    hist = client.get_metric_history(run, "val_accuracy")
    assert sorted((m.step, m.value) for m in hist) == [(1, 0.9), (2, 0.6)], "no second point"
    logged = client.get_logged_model(model.model_id)
    got = {m.key: (m.step, m.value) for m in logged.metrics}
    assert got == {"val_accuracy": (1, 0.9), "epoch": (1, 1.0)}
    assert model_value(logged, "val_accuracy") == 0.9 and model_value(logged, "x") is None


def test_the_registered_model_is_the_best_epochs_not_the_last(ray_cluster, home, tmp_path):
    """Two workers (DDP): the objective is `epoch`, minimized, so the best epoch is known in
    advance (the first) whatever the numerics; its accuracy differs from the last epoch's."""
    from trainer.data import load_dataset

    spec = make_spec(
        name="bestckpt",
        objective={"metric": "epoch", "direction": "minimize"},
        search_space={"lr": {"type": "categorical", "choices": [0.01]}},
        budget={"trials": 1, "parallel": 1},
        resources={"workers": 2},
        trainer={"epochs": 3, "batch_size": 32},
    )
    api.validate_spec(spec)
    out = api.run(spec, install_signals=False)
    assert out.state == "finished", out.reason
    (trial,) = api.show("bestckpt")["trials"]
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    run_id = trial["mlflow_run_id"]
    hist = {m.step: m.value for m in client.get_metric_history(run_id, "val_accuracy")}
    assert sorted(hist) == [1, 2, 3], "one point per epoch, none added by the model"
    assert hist[1] != hist[3], "the test needs a last epoch that differs from the best"

    (logged,) = client.search_logged_models(
        [out.experiment_id], filter_string=f"source_run_id = '{run_id}'"
    )
    m = {x.key: x for x in logged.metrics}
    assert m["val_accuracy"].step == 1 and m["val_accuracy"].value == hist[1]
    assert m["epoch"].value == 1.0 and "final_val_accuracy" not in m
    (output,) = client.get_run(run_id).outputs.model_outputs
    assert (output.model_id, output.step) == (logged.model_id, 1)

    promo = api.promote("bestckpt", "bestckpt-model")
    assert promo["moved"] and promo["value"] == 1.0  # the version's gate value is the model's
    ds = load_dataset("digits", val_fraction=spec.trainer.val_fraction, seed=0)
    npy = tmp_path / "x_val.npy"
    np.save(npy, ds.x_val.numpy())
    pred = np.asarray(api.predict("bestckpt-model@champion", str(npy)))
    acc = float((pred.argmax(1) == ds.y_val.numpy()).mean())
    assert acc == pytest.approx(hist[1], abs=0.5 / len(ds.y_val))  # the same samples right
    assert acc != pytest.approx(hist[3], abs=0.5 / len(ds.y_val))
