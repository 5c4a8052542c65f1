"""
Optuna example that optimizes multi-layer perceptrons using PyTorch.

In this example, we optimize the validation accuracy of hand-written digit recognition using
PyTorch and scikit-learn's digits dataset. We optimize the neural network architecture as well
as the optimizer configuration. Written as optuna-examples' pytorch/pytorch_simple.py is, with
the digits dataset (no download), and DistributedDataParallel when a trial has several workers.

The objective is plain Optuna. The one line that is not is `sweeps.optimize(...)` in __main__:
it stands for `optuna.create_study(...)` followed by `study.optimize(...)`, and runs each trial
on `--workers` Ray Train workers.

    python examples/optuna/pytorch_simple.py --storage sqlite:///optuna.db
"""

import argparse
import json
import os

import optuna
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from optuna.trial import TrialState
from sklearn.datasets import load_digits

DEVICE = torch.device("cpu")
BATCHSIZE = 64
CLASSES = 10
EPOCHS = 2
N_TRAIN_EXAMPLES = BATCHSIZE * 20
N_VALID_EXAMPLES = BATCHSIZE * 5
RECORD_DIR = None  # --record-dir: each rank writes the params it was given there


def define_model(trial):
    # We optimize the number of layers, hidden units and dropout ratio in each layer.
    n_layers = trial.suggest_int("n_layers", 1, 3)
    layers = []

    in_features = 64
    for i in range(n_layers):
        out_features = trial.suggest_int(f"n_units_l{i}", 4, 128)
        layers.append(nn.Linear(in_features, out_features))
        layers.append(nn.ReLU())
        p = trial.suggest_float(f"dropout_l{i}", 0.2, 0.5)
        layers.append(nn.Dropout(p))

        in_features = out_features
    layers.append(nn.Linear(in_features, CLASSES))
    layers.append(nn.LogSoftmax(dim=1))

    return nn.Sequential(*layers)


def get_digits():
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y)
    train = torch.utils.data.TensorDataset(x[:N_TRAIN_EXAMPLES], y[:N_TRAIN_EXAMPLES])
    valid_end = N_TRAIN_EXAMPLES + N_VALID_EXAMPLES
    valid = torch.utils.data.TensorDataset(
        x[N_TRAIN_EXAMPLES:valid_end], y[N_TRAIN_EXAMPLES:valid_end]
    )
    train_loader = torch.utils.data.DataLoader(train, batch_size=BATCHSIZE, shuffle=True)
    valid_loader = torch.utils.data.DataLoader(valid, batch_size=BATCHSIZE)
    return train_loader, valid_loader


def objective(trial):
    torch.manual_seed(0)

    # Generate the model.
    model = define_model(trial).to(DEVICE)
    distributed = dist.is_available() and dist.is_initialized()
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)

    # Generate the optimizers.
    optimizer_name = trial.suggest_categorical("optimizer", ["Adam", "RMSprop", "SGD"])
    lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    optimizer = getattr(optim, optimizer_name)(model.parameters(), lr=lr)

    if RECORD_DIR:
        rank = dist.get_rank() if distributed else 0
        path = os.path.join(RECORD_DIR, f"trial{trial.number}-rank{rank}.json")
        with open(path, "w") as f:
            json.dump(trial.params, f)

    # Get the digits dataset.
    train_loader, valid_loader = get_digits()

    # Training of the model.
    for epoch in range(EPOCHS):
        model.train()
        for data, target in train_loader:
            data, target = data.to(DEVICE), target.to(DEVICE)

            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()

        # Validation of the model.
        model.eval()
        correct = 0
        with torch.no_grad():
            for data, target in valid_loader:
                data, target = data.to(DEVICE), target.to(DEVICE)
                output = model(data)
                # Get the index of the max log-probability.
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum().item()

        accuracy = correct / N_VALID_EXAMPLES

        trial.report(accuracy, epoch)

        # Handle pruning based on the intermediate value.
        if trial.should_prune():
            raise optuna.exceptions.TrialPruned()

    trial.set_user_attr("n_params", sum(p.numel() for p in model.parameters()))
    return accuracy


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--storage", default="sqlite:///example.db")
    parser.add_argument("--study-name", default="pytorch-simple")
    parser.add_argument("--n-trials", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--record-dir", default=None)
    args = parser.parse_args()
    RECORD_DIR = args.record_dir

    # Optuna's example reads:
    #     study = optuna.create_study(direction="maximize")
    #     study.optimize(objective, n_trials=100, timeout=600)
    # This call is the point: the same objective, each trial on `workers` Ray Train workers
    # (DDP), the study written to `storage`, and the same optuna.Study returned.
    import sweeps

    study = sweeps.optimize(
        objective,
        n_trials=args.n_trials,
        timeout=600,
        workers=args.workers,
        study_name=args.study_name,
        storage=args.storage,
        direction="maximize",
        # A trial under 30% accuracy after an epoch is not worth finishing.
        pruner=optuna.pruners.ThresholdPruner(lower=0.3),
        load_if_exists=True,
    )

    pruned_trials = study.get_trials(deepcopy=False, states=[TrialState.PRUNED])
    complete_trials = study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])

    print("Study statistics: ")
    print("  Number of finished trials: ", len(study.trials))
    print("  Number of pruned trials: ", len(pruned_trials))
    print("  Number of complete trials: ", len(complete_trials))

    print("Best trial:")
    trial = study.best_trial

    print("  Value: ", trial.value)

    print("  Params: ")
    for key, value in trial.params.items():
        print(f"    {key}: {value}")
