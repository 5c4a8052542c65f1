# One image for the mlflow server, Ray head/workers, optuna-dashboard and the sweeps CLI.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 1000 sweeps
WORKDIR /app
COPY pyproject.toml README.md ./
COPY sweeps ./sweeps
COPY trainer ./trainer
COPY tracking ./tracking
COPY conf ./conf
COPY docker ./docker
RUN pip install --no-cache-dir . && chown -R sweeps /app
USER sweeps
ENV SWEEPS_HOME=/app/.sweeps
CMD ["sweeps", "--help"]
