#!/bin/sh
# optuna-dashboard on OPTUNA_STORAGE. It opens the storage without creating Optuna's tables, so on
# a fresh database it would exit: create them first (what any Optuna client does on first use).
set -eu
python3 -c 'import sys, optuna; optuna.storages.RDBStorage(sys.argv[1])' "$OPTUNA_STORAGE"
exec optuna-dashboard --host 0.0.0.0 --port 8080 "$OPTUNA_STORAGE"
