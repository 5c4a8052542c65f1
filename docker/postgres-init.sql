-- The MLflow backend gets its own database next to Optuna's.
CREATE DATABASE mlflow;
