# One image for every service of the team stack (MLflow server, Ray head and workers,
# optuna-dashboard, the sweeps CLI): built once, its layers shared by every container.
# BASE_IMAGE: a Debian-based Python 3.11 with `python3 -m venv`. Users get the official slim image;
# hosts that reach no image registry pass the one docker/build-base.sh builds from Debian's packages.
ARG BASE_IMAGE=python:3.11-slim

# The requirements alone, out of pyproject.toml: the big layer below depends on this file's
# content only, so editing anything else in pyproject.toml (dev extras, tool settings) keeps it.
FROM ${BASE_IMAGE} AS requirements
COPY pyproject.toml constraints.txt docker/deps.py /tmp/build/
RUN python3 /tmp/build/deps.py /tmp/build/pyproject.toml team > /tmp/requirements.txt \
    && cp /tmp/build/constraints.txt /tmp/constraints.txt

FROM ${BASE_IMAGE}

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/venv \
    && useradd --create-home --uid 1000 sweeps \
    && mkdir -p /shared /app \
    && chown sweeps:sweeps /shared /app

# Where pip gets wheels: the package index unless set. CI points them at a local wheelhouse
# (docker/build-image.sh). Build args only: nothing of them stays in the image's environment.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
# The dependencies in their own (largest: torch) layer, so a change to the source reuses it.
COPY --from=requirements /tmp/requirements.txt /tmp/constraints.txt /tmp/build/
# Exact versions from constraints.txt (pyproject.toml only has ranges): what the tests ran with.
RUN pip install -q --upgrade pip \
    && pip install -q -r /tmp/build/requirements.txt -c /tmp/build/constraints.txt \
    && rm -rf /tmp/build

WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY sweeps ./sweeps
COPY trainer ./trainer
COPY tracking ./tracking
COPY conf ./conf
COPY docker ./docker
# Editable: the code stays in /app beside conf/ (tracking/costs.py reads conf/machines.yaml from
# the source tree, which a wheel install would not carry).
RUN pip install -q --no-deps --no-build-isolation -e . \
    && mkdir -p /run/ray-auth /var/lib/mlflow-auth /run/gpu-claims \
    && chown sweeps:sweeps /run/ray-auth /var/lib/mlflow-auth /run/gpu-claims \
    && chmod 700 /run/ray-auth /var/lib/mlflow-auth
USER sweeps
ENV SWEEPS_HOME=/home/sweeps/.sweeps
CMD ["sweeps", "--help"]
