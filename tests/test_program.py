"""Program mode on a worker, without Ray: `run_program` runs real scripts (that import nothing
from sweeps) as child processes and reports what they print or write, as a trial would."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import ROOT

from sweeps.spec import spec_from_dict
from sweeps.worker import program, runtime

ANY = ROOT / "examples" / "any_script"
SEED4 = ROOT / "examples" / "seed004"
SCRIPTS = ROOT / "tests" / "scripts"


def _settings(code_dir, command, metric="val_accuracy", space=None, **trainer):
    spec = spec_from_dict(
        {
            "name": "p",
            "objective": {"metric": metric},
            "search_space": space or {"lr": {"type": "float", "low": 0.01, "high": 0.1}},
            "trainer": {"code_dir": str(code_dir), "command": command, **trainer},
        }
    )
    return program.settings(spec)


def _ctx(rank=0, world=1, broker=None):
    return runtime.TrialContext(
        rank=rank,
        world_size=world,
        local_rank=rank,
        device=None,
        data_dir=None,
        trial_number=7,
        seed=0,
        params={},
        lane_id="lane",
        seq=1,
        broker=broker,
    )


def _run(settings, params, ctx=None):
    runtime._set_context(ctx or _ctx())
    try:
        return program.run_program({**params, "epochs": 99, program.SETTINGS_KEY: settings})
    finally:
        runtime._set_context(None)


def _prune_at(monkeypatch, step, seen, script):
    """The real report; at `step` the pruner says stop (and we note the script's processes)."""
    real = runtime.report

    def report(metrics, **kw):
        real(metrics, **kw)
        seen.append((runtime.context().step, dict(metrics)))
        if runtime.context().step == step:
            seen.append(_script_group(script))
            seen.append(time.monotonic())
            raise runtime.TrialPruned(f"pruned at step {step}")

    monkeypatch.setattr(runtime, "report", report)


def _script_group(script: str) -> list[tuple[psutil.Process, str]]:
    """The trial's script and every process in its process group. Only those: the test process
    may also be the parent of a Ray cluster another test started, whose processes live on."""
    procs = []
    for c in psutil.Process().children(recursive=True):
        try:
            procs.append((c, " ".join(c.cmdline()), os.getpgid(c.pid)))
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    groups = {g for _, cmd, g in procs if script in cmd}
    return [(c, cmd) for c, cmd, g in procs if g in groups]


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class _Board:
    """The broker's board (put/get/peek), in-process: enough for ranks that are threads."""

    def __init__(self):
        self.values, self.cv = {}, threading.Condition()

    def _put(self, key, value):
        with self.cv:
            self.values[key] = value
            self.cv.notify_all()

    def _get(self, key):
        with self.cv:
            self.cv.wait_for(lambda: key in self.values, timeout=30)
            return self.values[key]

    put = property(lambda self: _Remote(self._put))
    get = property(lambda self: _Remote(self._get))
    peek = property(lambda self: _Remote(lambda key: self.values.get(key)))


def test_two_ranks_train_with_ddp_and_rank0_reports_every_epoch(monkeypatch, capfd):
    reports = []

    def report(metrics, **kw):  # what reaches the broker, recorded
        ctx = runtime.context()
        ctx.step += 1
        reports.append((ctx.rank, ctx.step, dict(metrics)))

    monkeypatch.setattr(runtime, "report", report)
    s = _settings(ANY, ["${interpreter}", "train.py", "${args}", "--epochs=3"])
    results = _two_ranks(s, {"lr": 0.05})
    assert results[1] is None, results
    assert isinstance(results[0], dict), results
    assert [(r, step) for r, step, _ in reports] == [(0, 1), (0, 2), (0, 3)]
    assert all(set(m) == {"val_accuracy", "loss"} for _, _, m in reports)
    assert results[0]["val_accuracy"] == reports[-1][2]["val_accuracy"] > 0.5
    out = capfd.readouterr().out
    # Both ranks on CPU: one thread each (cpus_per_worker 1), not every core.
    assert "training on 2 process(es), threads per process: 1" in out
    assert "epoch=3 loss=" in out


def _two_ranks(settings, params):
    board, results = _Board(), {}

    def rank(r):
        runtime._set_context(_ctx(r, 2, board))
        try:
            results[r] = program.run_program({**params, program.SETTINGS_KEY: settings})
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            results[r] = e
        finally:
            runtime._set_context(None)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_a_failing_rank_stops_the_others(monkeypatch):
    monkeypatch.setattr(runtime, "report", lambda m, **kw: None)  # rank 0 keeps going
    t0 = time.monotonic()
    results = _two_ranks(_settings(SCRIPTS, ["${interpreter}", "rank1_fails.py"]), {"lr": 0.1})
    assert isinstance(results[1], program.ProgramError) and results[1].returncode == 5
    assert "out of memory" in str(results[1])
    assert isinstance(results[0], program.ProgramError)
    assert "rank 1 of the trial failed" in str(results[0])
    assert time.monotonic() - t0 < 60  # not the 200 s rank 0's script would have run


def test_pruned_script_and_its_process_group_are_stopped(monkeypatch):
    seen: list = []
    _prune_at(monkeypatch, 2, seen, "train.py")
    s = _settings(ANY, ["${interpreter}", "train.py", "${args}", "--epochs=100000"])
    with pytest.raises(runtime.TrialPruned):
        _run(s, {"lr": 0.05})
    stopped_in = time.monotonic() - seen[3]
    assert [step for step, *_ in seen[:2]] == [1, 2]
    children = seen[2]
    assert any("train.py" in cmd for _, cmd in children)
    assert not [c for c, _ in children if c.is_running()], "the script outlived its trial"
    assert stopped_in < s["stop_grace_s"]  # SIGTERM took it down: no SIGKILL was needed


def test_a_script_that_ignores_sigterm_is_killed_after_the_grace_period(monkeypatch):
    seen: list = []
    _prune_at(monkeypatch, 2, seen, "stubborn.py")
    s = _settings(SCRIPTS, ["${interpreter}", "stubborn.py"], stop_grace_s=1)
    with pytest.raises(runtime.TrialPruned):
        _run(s, {"lr": 0.05})
    stopped_in = time.monotonic() - seen[3]
    children = seen[2]
    assert any("stubborn.py" in cmd for _, cmd in children)
    assert not [c for c, _ in children if c.is_running()]
    assert 1 <= stopped_in < 10  # SIGTERM ignored, SIGKILL after the 1 s grace


def test_seed004_script_file_metrics_and_its_model_as_artifacts(monkeypatch):
    reports: list = []
    real = runtime.report
    monkeypatch.setattr(runtime, "report", lambda m, **kw: (real(m, **kw), reports.append(dict(m))))
    s = _settings(
        SEED4,
        ["${interpreter}", "train.py", "${args}", "--epochs=3"],
        metric="accuracy",
        space={"learning-rate": {"type": "float", "low": 0.01, "high": 0.1}},
        metrics={"collector": "file", "path": "metrics.json"},
    )
    out = _run(s, {"learning-rate": 0.05})
    assert reports and reports[-1]["accuracy"] == out["accuracy"] > 0.5
    assert "val_loss" in out and "epoch" not in out  # the epoch is the step, not a metric
    with tarfile.open(fileobj=io.BytesIO(out["artifacts"]), mode="r:gz") as tar:
        names = tar.getnames()
        meta = json.load(tar.extractfile("metrics.json"))
    assert {"model.pth", "metrics.json"} <= set(names)
    assert meta["epoch"] == 3


def test_a_failing_script_fails_the_trial_with_its_exit_code_and_stderr_tail():
    s = _settings(SCRIPTS, ["${interpreter}", "fail.py"])
    with pytest.raises(program.ProgramError) as e:
        _run(s, {"lr": 0.05})
    msg = str(e.value)
    assert "fail.py exited with code 3" in msg and e.value.returncode == 3
    assert "stderr line 79" in msg and "stderr line 30" in msg  # the last 50 lines
    assert "stderr line 29" not in msg


def test_an_abort_at_exit_from_gloo_threads_says_how_to_end_the_script():
    s = _settings(SCRIPTS, ["${interpreter}", "abort_at_exit.py"])
    with pytest.raises(program.ProgramError) as e:
        _run(s, {"lr": 0.05})
    assert e.value.returncode == -signal.SIGABRT
    first = str(e.value).splitlines()[0]
    assert first.startswith("abort_at_exit.py was killed by SIGABRT (torch.distributed's gloo")
    assert "dist.destroy_process_group()" in first


def test_a_metric_that_never_comes_names_it_and_what_was_seen():
    s = _settings(SCRIPTS, ["${interpreter}", "env_dump.py"])
    with pytest.raises(program.ProgramError, match="'val_accuracy' was never seen.*seen: score"):
        _run(s, {"lr": 0.05})
    s = _settings(SCRIPTS, ["${interpreter}", "fail.py"], metrics={"regex": r"acc: (\d+)"})
    s["command"] = ["${interpreter}", "env_dump.py"]
    with pytest.raises(program.ProgramError, match="never seen in stdout lines matching"):
        _run(s, {"lr": 0.05})


def test_a_missing_script_is_a_clear_error_before_anything_runs(tmp_path):
    s = _settings(tmp_path, ["${interpreter}", "train.py", "${args}"])
    with pytest.raises(FileNotFoundError, match=r"trainer.command: train.py not found in"):
        _run(s, {"lr": 0.05})
    s["command"] = ["no-such-tool-xyz", "${args}"]
    with pytest.raises(FileNotFoundError, match="no-such-tool-xyz not found on PATH"):
        _run(s, {"lr": 0.05})


def test_macros_environment_and_folders_reach_the_script():
    s = _settings(
        SCRIPTS,
        [
            "${interpreter}",
            "env_dump.py",
            "--params",
            "${args_json_file}",
            "${args_no_hyphens}",
            "--out=${trial_dir}",
        ],
        metric="score",
        space={
            "lr": {"type": "float", "low": 0.01, "high": 0.1},
            "opt": {"type": "categorical", "choices": ["sgd"]},
        },
        params={"width": 8},
    )
    out = _run(s, {"lr": 0.05, "opt": "sgd", "width": 8})
    with tarfile.open(fileobj=io.BytesIO(out["artifacts"]), mode="r:gz") as tar:
        info = json.load(tar.extractfile("info.json"))
    env, argv = info["env"], info["argv"]
    assert argv[:1] == ["--params"] and argv[2:5] == ["lr=0.05", "opt=sgd", "width=8"]
    assert "epochs=99" not in " ".join(argv)  # only the params, not the trainer's settings
    assert info["params_file"] == {"lr": 0.05, "opt": "sgd", "width": 8}
    assert (
        argv[5] == f"--out={env['SWEEPS_TRIAL_DIR']}"
        and env["AIP_MODEL_DIR"] == env["SWEEPS_TRIAL_DIR"]
    )
    assert not os.path.exists(env["SWEEPS_TRIAL_DIR"])  # cleaned up once packed
    assert env["CLOUD_ML_TRIAL_ID"] == "8" and env["RANK"] == "0" and env["WORLD_SIZE"] == "1"
    assert env["CLOUD_ML_HP_METRIC_FILE"].endswith("output.metrics")
    # Its own copy of code_dir, next to its trial folder.
    assert info["cwd"] == str(Path(env["SWEEPS_TRIAL_DIR"]).parent / "work")
    assert out["score"] == 7.0  # len(sys.argv)


def test_hypertune_metrics_are_reported_at_their_global_step(monkeypatch):
    reports: list = []
    real = runtime.report
    monkeypatch.setattr(
        runtime,
        "report",
        lambda m, **kw: (real(m, **kw), reports.append((runtime.context().step, dict(m)))),
    )
    s = _settings(
        SCRIPTS,
        ["${interpreter}", "hypertune_task.py", "${args}", "--epochs=3"],
        metric="accuracy",
        metrics={"collector": "hypertune"},
    )
    out = _run(s, {"lr": 0.05})
    assert [(step, m["accuracy"]) for step, m in reports] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert out["accuracy"] == 0.3


PARENT = """
import os, sys, time
from sweeps.worker.procgroup import Script
s = Script([sys.executable, "-c", "import time; time.sleep(120)"], ".", dict(os.environ), False)
print(s.proc.pid, flush=True)
time.sleep(120)
"""


def test_a_script_does_not_outlive_a_killed_worker():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, env=env)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the script outlived its worker"
            time.sleep(0.1)
    finally:
        parent.kill()


RELATIVE_IO = """
import argparse, json, os

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
args = parser.parse_args()
with open("data/labels.txt") as f:  # a relative read, next to the script
    labels = f.read().split()
os.makedirs("outputs", exist_ok=True)
with open("outputs/model.json", "w") as f:  # relative writes, as scripts do
    json.dump({"lr": args.lr, "labels": labels}, f)
with open("config.json", "w") as f:  # rewrites a file of the user's tree
    json.dump({"lr": args.lr}, f)
print(f"cwd={os.getcwd()}")
print(f"val_accuracy={len(labels) / 10}")
"""


def test_each_trial_runs_in_its_own_copy_of_code_dir_and_its_writes_become_artifacts(tmp_path):
    (tmp_path / "train.py").write_text(RELATIVE_IO)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "labels.txt").write_text("cat dog bird")
    (tmp_path / "config.json").write_text('{"lr": "the user\'s own"}')
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main")
    s = _settings(tmp_path, ["${interpreter}", "train.py", "${args}"])
    out = _run(s, {"lr": 0.05})
    assert out["val_accuracy"] == 0.3, "the relative read found the data"
    assert not (tmp_path / "outputs").exists(), "relative writes stay out of the user's tree"
    assert (tmp_path / "config.json").read_text() == '{"lr": "the user\'s own"}'
    with tarfile.open(fileobj=io.BytesIO(out["artifacts"]), mode="r:gz") as tar:
        got = set(tar.getnames())
        model = json.load(tar.extractfile("workdir/outputs/model.json"))
    assert got == {"workdir/outputs/model.json", "workdir/config.json"}, got
    assert model == {"lr": 0.05, "labels": ["cat", "dog", "bird"]}


def test_a_trial_view_copies_small_files_links_big_ones_and_skips_stores(tmp_path):
    from sweeps.worker import workdir

    code, view = tmp_path / "code", tmp_path / "view"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "mod.py").write_text("x = 1")
    (code / "weights.bin").write_bytes(b"0" * (workdir.COPY_MAX_BYTES + 1))
    for skipped in (".venv", "wandb", "__pycache__"):
        (code / skipped).mkdir()
        (code / skipped / "f").write_text("-")
    view.mkdir()
    placed = workdir.make_view(code, view)
    assert sorted(placed) == ["pkg/mod.py", "weights.bin"]
    assert (view / "weights.bin").stat().st_ino == (code / "weights.bin").stat().st_ino
    assert (view / "pkg" / "mod.py").stat().st_ino != (code / "pkg" / "mod.py").stat().st_ino
    assert workdir.written(view, placed) == []
    (view / "new.txt").write_text("n")
    assert workdir.written(view, placed) == [view / "new.txt"]
