"""Legacy AI Platform (Cloud ML Engine) hyperparameter jobs, run unchanged.

`to_spec` maps a job's `trainingInput` to a native spec (pure); `package_root`, `sweep_name` and
`apply_gcloud_flags` read gcloud's command line as gcloud does. `run_module` is the entrypoint
each Ray Train worker runs for such a trial: the user's module as a subprocess (program mode's
runner) with the params as `--name=value` flags, `--job-dir`, and torch.distributed variables;
the metric is read the way AI Platform read it, from what `cloudml-hypertune` writes to
`CLOUD_ML_HP_METRIC_FILE`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.importers.base import Importer

ALGORITHMS = {"GRID_SEARCH": "grid", "RANDOM_SEARCH": "random", "ALGORITHM_UNSPECIFIED": "tpe"}
MAX_SHIPPED = 5 * 2**20  # a package shipped to an image with the spec (bytes, packed)
TIERS = {"BASIC": "n1-standard-4", "STANDARD_1": "n1-standard-8", "BASIC_GPU": "n1-standard-8-t4"}


def _param(p: dict[str, Any], i: int) -> tuple[str, dict[str, Any], str | None]:
    where = f"trainingInput.hyperparameters.params[{i}]"
    name = p.get("parameterName")
    if not name:
        raise SpecError(f"{where}.parameterName: required")
    kind = p.get("type")
    scale = p.get("scaleType", "UNIT_LINEAR_SCALE")
    note = None
    if kind in ("DOUBLE", "INTEGER"):
        if "minValue" not in p or "maxValue" not in p:
            raise SpecError(f"{where}: {kind} needs minValue and maxValue")
        out: dict[str, Any] = {
            "type": "float" if kind == "DOUBLE" else "int",
            "low": p["minValue"],
            "high": p["maxValue"],
        }
        if scale in ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE"):
            out["log"] = True
            if scale == "UNIT_REVERSE_LOG_SCALE":
                note = f"{name}: UNIT_REVERSE_LOG_SCALE searched on a log scale"
        return name, out, note
    if kind == "CATEGORICAL":
        return (
            name,
            {"type": "categorical", "choices": list(p.get("categoricalValues") or [])},
            None,
        )
    if kind == "DISCRETE":
        return name, {"type": "categorical", "choices": list(p.get("discreteValues") or [])}, None
    raise SpecError(f"{where}.type: unknown type {kind!r} (DOUBLE, INTEGER, CATEGORICAL, DISCRETE)")


def to_spec(
    config: dict[str, Any],
    *,
    name: str,
    package_path: str | None,
    module_name: str,
    user_args: list[str] | None = None,
    job_dir: str | None = None,
    cluster_python: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """AI Platform job config -> (raw native spec, notes on what was approximated).

    `package_path` None: a custom container job, its module in the image. `job_dir`: gcloud's
    --job-dir, passed to the module only when set, and as given. `cluster_python`: an image
    job's package runs on the cluster's own Python instead of in the image.
    """
    ti = config.get("trainingInput")
    if not isinstance(ti, dict):
        raise SpecError("trainingInput: required (an AI Platform job config)")
    hp = ti.get("hyperparameters") or {}
    if not hp.get("params"):
        raise SpecError("trainingInput.hyperparameters.params: at least one parameter")
    job_dir = job_dir or ti.get("jobDir") or None  # gcloud's --job-dir overrides the config's
    for arg in [*(user_args or []), job_dir or ""]:
        if "${" in arg:  # the command runner would read it as a macro
            raise SpecError(f"argument {arg!r}: '${{' is not passed on literally; expand it first")
    notes: list[str] = []
    space = {}
    for i, p in enumerate(hp["params"]):
        pname, dist, note = _param(p, i)
        space[pname] = dist
        if note:
            notes.append(note)
    goal = str(hp.get("goal", "MAXIMIZE")).upper()
    tag = hp.get("hyperparameterMetricTag") or "training/hptuning/metric"
    machine = _machine(ti, notes)
    accel = (ti.get("masterConfig") or {}).get("acceleratorConfig") or {}
    algorithm = ALGORITHMS.get(str(hp.get("algorithm", "ALGORITHM_UNSPECIFIED")))
    if algorithm is None:
        raise SpecError(f"trainingInput.hyperparameters.algorithm: unknown {hp.get('algorithm')!r}")
    spec = {
        "name": name,
        "objective": {"metric": tag, "direction": "maximize" if goal == "MAXIMIZE" else "minimize"},
        "search_space": space,
        "sampler": {"name": algorithm},
        "pruner": {"name": "median" if hp.get("enableTrialEarlyStopping") else "none"},
        "budget": {
            "trials": int(hp.get("maxTrials", 1)),
            "parallel": int(hp.get("maxParallelTrials", 1)),
            "max_failed_trials": hp.get("maxFailedTrials"),
        },
        "resources": {
            "workers": 1 + int(ti.get("workerCount", 0)),
            "machine_type": machine,
            "whole_machines": True,  # each replica (master, workers) is a VM of its own
        },
        "trainer": {
            "entrypoint": names.AIPLATFORM_ENTRYPOINT,
            "params": {
                "module_name": module_name,
                "user_args": list(user_args or []),
                "metric_tag": tag,
                "package_path": "",
                "param_names": list(space),
                "tf_config_job": tf_config_job(ti, module_name, user_args, job_dir),
            },
        },
    }
    if job_dir:
        spec["trainer"]["params"]["job_dir"] = job_dir
    if spec["budget"]["max_failed_trials"] is None:
        del spec["budget"]["max_failed_trials"]
    if accel.get("count"):
        spec["resources"]["gpus_per_worker"] = float(accel["count"])
    _place_package(spec, notes, image_uri(config), package_path, cluster_python)
    return spec, notes


def _machine(ti: dict[str, Any], notes: list[str]) -> str:
    """The machine type a trial is priced as: the master's (or its scale tier's)."""
    from tracking.costs import machines

    machine = ti.get("masterType") or TIERS.get(ti.get("scaleTier", "BASIC"), "n1-standard-4")
    if machine not in machines():
        notes.append(f"machine type {machine} is not in the price table: costed as 'local'")
        machine = "local"
    worker_type = ti.get("workerType")
    if ti.get("workerCount") and worker_type and worker_type != machine:
        notes.append(f"workerType {worker_type}: priced as {machine} (a spec has one machine type)")
    return machine


def _place_package(
    spec: dict[str, Any],
    notes: list[str],
    image: str | None,
    package_path: str | None,
    cluster_python: bool,
) -> None:
    """Where the module runs: a host package on the cluster's Python, a package installed in
    the job's image (shipped with the spec: a container sees no host folder), or (no package)
    the image's own module."""
    params = spec["trainer"]["params"]
    if package_path is not None and (not image or cluster_python):
        root = str(Path(package_path).resolve())
        spec["trainer"]["code_dir"] = params["package_path"] = root
        if image:
            notes.append(f"--cluster-python: the package runs on the cluster's Python, not {image}")
        return
    if not image:
        raise SpecError("--package-path: required without --master-image-uri")
    spec["resources"]["image"] = image
    if package_path is None:
        notes.append(f"masterConfig.imageUri {image}: each trial's workers run in it (podman)")
        return
    from sweeps.worker.cloudml import archive

    blob = archive(package_path)
    if len(blob) > MAX_SHIPPED * 4 // 3:
        raise SpecError(
            f"--package-path {package_path}: over {MAX_SHIPPED // 2**20} MB packed, too big to "
            "ship with the job to the image: install it in the image, or drop --package-path"
        )
    params["package_archive"] = blob
    notes.append(
        f"--master-image-uri {image} with --package-path: the package is installed and run in "
        "the image on each node (podman); --cluster-python runs it on this cluster's own Python"
    )


def tf_config_job(
    ti: dict[str, Any], module: str, user_args: list[str] | None, job_dir: str | None
) -> dict[str, Any]:
    """TF_CONFIG's `job`: the job's trainingInput with snake_case keys, as AI Platform wrote it."""

    def snake(v: Any) -> Any:
        if isinstance(v, dict):
            return {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): snake(x) for k, x in v.items()}
        return [snake(x) for x in v] if isinstance(v, list) else v

    job = {**snake(ti), "python_module": module, "args": list(user_args or [])}
    if job_dir:
        job["job_dir"] = job_dir
    return job


def image_uri(config: dict[str, Any]) -> str | None:
    """The job's custom container (`masterConfig.imageUri`, or gcloud's --master-image-uri)."""
    ti = config.get("trainingInput") or {}
    return (
        ((ti.get("masterConfig") or {}).get("imageUri") or None) if isinstance(ti, dict) else None
    )


def load_config(path: str | Path) -> dict[str, Any]:
    from sweeps.spec.load import read_mapping

    return read_mapping(path, "AI Platform config", "a mapping with trainingInput")


# ----- gcloud's command line ------------------------------------------------------------------
def package_root(package_path: str | Path | None, module_name: str, config: Path | None) -> Path:
    """The folder `python -m MODULE` runs in (the package's parent).

    `--package-path` is the package folder itself, as in gcloud (`--package-path trainer/`); its
    parent folder works too. Without it the package is looked for next to the job config, then
    in the current folder.
    """
    top = module_name.split(".")[0]
    if package_path is not None:
        given = Path(package_path)
        if not given.is_dir():
            raise SpecError(f"--package-path: folder not found: {given}")
        places = [given.resolve()]
    else:
        places = [p.resolve() for p in (config.parent if config else None, Path.cwd()) if p]
    for place in places:
        roots = ([place.parent] if place.name == top else []) + [place]
        for root in roots:
            if _has_module(root, module_name):
                return root
    if package_path is not None:
        raise SpecError(
            f"--package-path {package_path}: module {module_name} not found "
            f"(give the package folder, e.g. {top}/, or the folder that holds it)"
        )
    where = " or ".join(str(p) for p in dict.fromkeys(places))
    raise SpecError(f"--package-path: not given, and no package '{top}' in {where}")


def _has_module(root: Path, module_name: str) -> bool:
    rel = root.joinpath(*module_name.split("."))
    return rel.with_suffix(".py").is_file() or (rel / "__main__.py").is_file()


def sweep_name(config: dict[str, Any], root: Path, module_name: str, job: str | None) -> str:
    """The job's name (gcloud's JOB argument, or `jobId` in the config), else the project's
    folder: never the config file's stem, which is nearly always "config"."""
    for candidate in (job, config.get("jobId"), root.name, module_name.split(".")[0]):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(candidate or "")).strip("-._")[:100]
        if name:
            return name
    return "aiplatform"


def apply_gcloud_flags(
    config: dict[str, Any],
    *,
    scale_tier: str | None,
    master_machine_type: str | None,
    master_image_uri: str | None = None,
    job_dir: str | None = None,
) -> dict[str, Any]:
    """gcloud's --scale-tier / --master-machine-type / --master-image-uri / --job-dir override
    the config, as they do there."""
    ti = dict(config.get("trainingInput") or {})
    if scale_tier:
        ti["scaleTier"] = scale_tier.upper().replace("-", "_")
    if master_machine_type:
        ti["masterType"] = master_machine_type
        ti.setdefault("scaleTier", "CUSTOM")
    if master_image_uri:
        ti["masterConfig"] = {**(ti.get("masterConfig") or {}), "imageUri": master_image_uri}
    if job_dir:
        ti["jobDir"] = job_dir
    return {**config, "trainingInput": ti} if ti else config


class AIPlatformImporter(Importer):
    """A legacy AI Platform job config (trainingInput); its package sits next to it, and its
    module is `trainer.task`, as in Google's samples."""

    name = "aiplatform"
    reads = "a legacy AI Platform job config (trainingInput, YAML)"
    module = "trainer.task"

    def read(self, path: Path) -> dict[str, Any]:
        return load_config(path)

    def to_spec(
        self, config: dict[str, Any], *, source: Path, name: str | None = None
    ) -> tuple[dict[str, Any], list[str]]:
        image = image_uri(config)
        root = Path.cwd() if image else package_root(None, self.module, source)
        return to_spec(
            config,
            name=name or sweep_name(config, root, self.module, None),
            package_path=None if image else str(root),
            module_name=self.module,
            user_args=[],
        )


# ----- on the workers -------------------------------------------------------------------------
def run_module(config: dict[str, Any]) -> dict[str, Any] | None:
    """Run the user's module on this worker as AI Platform does: its package installed (with
    its install_requires) when it has a setup.py, then `python -m MODULE USER_ARGS
    [--job-dir=JOB_DIR] --name=value ...` (the tuned params last, as AI Platform appends them),
    with the trial's identity in TF_CONFIG, CLOUD_ML_TRIAL_ID and AIP_MODEL_DIR; the metric
    from cloudml-hypertune (program mode's runner). Rank 0's result links what the trial wrote
    under the job dir."""
    from sweeps.worker import cloudml, program, runtime

    names = list(config.get("param_names", []))
    root = config.get("package_path") or ""
    if config.get("package_archive"):
        root = str(cloudml.unpack(config["package_archive"]))
    interpreter = cloudml.install(root) if root and cloudml.has_setup(root) else "${interpreter}"
    job_dir = config.get("job_dir") or None
    settings = {
        "command": [interpreter, "-m", config["module_name"]]
        + list(config.get("user_args", []))  # literal: to_spec refused any with "${"
        + ([f"--job-dir={job_dir}"] if job_dir else [])
        + ["${args}"],
        "code_dir": root,
        "metrics": {"collector": "hypertune"},
        "objectives": [config["metric_tag"]],
        "param_names": names,
        "cpus_per_worker": config.get("cpus_per_worker", 1.0),
        "job_dir": job_dir,
        "tf_config_job": config.get("tf_config_job"),
    }
    out = program.run_script(settings, {n: config[n] for n in names if n in config})
    if out is not None and job_dir:
        out["links"] = cloudml.outputs(job_dir, runtime.context().trial_number)
    return out
