"""Metric collectors on real streams and files, the step logic, and the command macros."""

from __future__ import annotations

import json
import sys

import pytest

from sweeps.common.errors import SpecError
from sweeps.contracts.protocol import Decision
from sweeps.spec import spec_from_dict
from sweeps.spec.command import check_command, expand, missing_files
from sweeps.worker import collectors, runtime
from sweeps.worker.program import _Reporter


def test_stdout_default_is_katibs_name_value_format():
    c = collectors.StdoutCollector("val_accuracy")
    assert c.feed("epoch=3 loss=0.2 val_accuracy=0.91") == [
        (3, {"loss": 0.2, "val_accuracy": 0.91})
    ]
    assert c.feed("step = 40 lr=1e-3") == [(40, {"lr": 0.001})]
    assert c.feed("val_accuracy=.5") == [(None, {"val_accuracy": 0.5})]
    assert c.feed("no metrics here: x = abc") == []
    # A progress bar redrawn with \r: each redraw is read.
    assert c.feed("epoch=1 val_accuracy=0.1\repoch=2 val_accuracy=0.2") == [
        (1, {"val_accuracy": 0.1}),
        (2, {"val_accuracy": 0.2}),
    ]


def test_stdout_custom_regexes_katib_and_sagemaker_style():
    katib = collectors.StdoutCollector("acc", r"(\w+):\s*([\d.]+)")
    assert katib.feed("Epoch 4/10 - loss: 0.30 - acc: 0.88") == [(4, {"loss": 0.3, "acc": 0.88})]
    sagemaker = collectors.StdoutCollector("val_acc", r"val acc ([\d.]+)")
    assert sagemaker.feed("[step 7] val acc 0.75") == [(7, {"val_acc": 0.75})]
    named = collectors.StdoutCollector("f1", r"it (?P<step>\d+) f1 (?P<value>[\d.]+)")
    assert named.feed("it 12 f1 0.4") == [(12, {"f1": 0.4})]


def test_file_collector_json_object_rewritten_and_half_written(tmp_path):
    p = tmp_path / "metrics.json"
    c = collectors.FileCollector(p)
    assert c.poll() == []  # not there yet
    p.write_text('{"epoch": 1, "accuracy": 0.5, "nested": {"f1": 0.4}')  # half-written
    assert c.poll() == []
    p.write_text('{"epoch": 1, "accuracy": 0.5, "nested": {"f1": 0.4}, "note": "x"}')
    assert c.poll() == [(1, {"accuracy": 0.5, "nested.f1": 0.4})]
    assert c.poll() == [] and c.finish() == []  # unchanged: nothing new
    p.write_text('{"epoch": 2, "accuracy": 0.7}')
    assert c.finish() == [(2, {"accuracy": 0.7})]


def test_file_collector_json_lines_array_and_histories(tmp_path):
    p = tmp_path / "m.jsonl"
    c = collectors.FileCollector(p)
    p.write_text('{"step": 1, "acc": 0.1}\n{"step": 2, "acc": 0.2}\n{"step": 3, "ac')
    assert c.poll() == [(1, {"acc": 0.1}), (2, {"acc": 0.2})]
    with p.open("a") as f:
        f.write('c": 0.3}')  # the last line completes, without its newline
    assert c.poll() == []  # may still be being written
    assert c.finish() == [(3, {"acc": 0.3})]

    a = tmp_path / "a.json"
    c = collectors.FileCollector(a)
    a.write_text(json.dumps([{"epoch": 1, "acc": 0.1}]))
    assert c.poll() == [(1, {"acc": 0.1})]
    a.write_text(json.dumps([{"epoch": 1, "acc": 0.1}, {"epoch": 2, "acc": 0.2}]))
    assert c.poll() == [(2, {"acc": 0.2})]

    h = tmp_path / "h.json"
    c = collectors.FileCollector(h)
    h.write_text(json.dumps({"val_accuracy": [0.5, 0.6], "loss": [1.0, 0.8]}))
    assert c.poll() == [
        (1, {"val_accuracy": 0.5, "loss": 1.0}),
        (2, {"val_accuracy": 0.6, "loss": 0.8}),
    ]
    h.write_text(json.dumps({"val_accuracy": [0.5, 0.6, 0.7], "loss": [1.0, 0.8, 0.7]}))
    assert c.poll() == [(3, {"val_accuracy": 0.7, "loss": 0.7})]


def test_hypertune_collector_reads_the_librarys_own_file(tmp_path, monkeypatch):
    import hypertune

    path = tmp_path / "hp" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
    hpt = hypertune.HyperTune()
    c = collectors.HypertuneCollector(path)
    hpt.report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag="accuracy", metric_value=0.5, global_step=1
    )
    hpt.report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag="accuracy", metric_value=0.6, global_step=2
    )
    assert [(s, m["accuracy"]) for s, m in c.poll()] == [(1, 0.5), (2, 0.6)]
    hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=0.7)
    assert [(s, m["accuracy"]) for s, m in c.poll()] == [(None, 0.7)]  # no step given


def test_tensorboard_collector_reads_scalar_events_as_they_grow(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    c = collectors.TensorboardCollector(tmp_path)
    assert c.poll() == []
    w = SummaryWriter(str(tmp_path / "tensorboard"))
    for step in (1, 2):
        w.add_scalar("val_accuracy", 0.5 + step / 10, step)
        w.add_scalar("loss", 1.0 / step, step)
    w.flush()
    assert c.poll() == [
        (1, {"tensorboard/val_accuracy": 0.6, "tensorboard/loss": 1.0}),
        (2, {"tensorboard/val_accuracy": 0.7, "tensorboard/loss": 0.5}),
    ]
    w.add_scalar("val_accuracy", 0.8, 3)
    w.close()
    root = SummaryWriter(str(tmp_path))  # a run at the top: tags as written
    root.add_scalar("acc", 0.9, 3)
    root.close()
    assert c.poll() == [(3, {"tensorboard/val_accuracy": 0.8, "acc": 0.9})]
    assert c.finish() == []


@pytest.fixture
def ctx():
    c = runtime.TrialContext(
        rank=0, world_size=1, local_rank=0, device=None, data_dir=None, trial_number=0, seed=0,
        params={}, broker=None,
    )  # fmt: skip
    runtime._set_context(c)
    yield c
    runtime._set_context(None)


def test_reporter_steps_pending_metrics_and_duplicates(ctx, monkeypatch):
    sent = []
    real = runtime.report
    monkeypatch.setattr(runtime, "report", lambda m: (real(m), sent.append((ctx.step, m))))
    r = _Reporter(ctx, ["acc"], None)
    r.handle([(None, {"lr": 0.1})])  # a config line: no step, no objective: not reported
    r.handle([(1, {"loss": 0.9}), (1, {"acc": 0.5})])  # train line, then the val line
    r.handle([(1, {"acc": 0.55})])  # the same epoch again: skipped
    r.handle([(None, {"acc": 0.6})])  # no step: the next one
    r.handle([(5, {"acc": 0.7, "loss": 0.4})])  # a jump: the script's step is kept
    assert sent == [
        (1, {"loss": 0.9, "acc": 0.5}),
        (2, {"acc": 0.6}),
        (5, {"acc": 0.7, "loss": 0.4}),
    ]
    assert r.final == {"loss": 0.4, "acc": 0.7} and r.seen == {"lr", "loss", "acc"}
    only = _Reporter(ctx, ["acc"], ["acc"])
    only.handle([(9, {"acc": 0.8, "loss": 0.1})])
    assert sent[-1] == (9, {"acc": 0.8})


def test_reporter_stops_on_a_non_finite_objective(ctx):
    r = _Reporter(ctx, ["acc"], None)
    with pytest.raises(FloatingPointError, match="'acc' is nan"):
        r.handle([(1, {"acc": float("nan")})])


def test_macros_expand_like_wandb():
    params = {"lr": 0.01, "deep": True, "wide": False, "opt": "adam"}
    kw = {"interpreter": "/py", "program": "train.py", "args_json_file": "/t/p.json"}
    assert expand(["${interpreter}", "${program}", "${args}"], params, **kw) == [
        "/py", "train.py", "--lr=0.01", "--deep=True", "--wide=False", "--opt=adam",
    ]  # fmt: skip
    assert expand(["${env}", "python", "x.py", "${args_no_boolean_flags}"], params, **kw) == [
        "/usr/bin/env", "python", "x.py", "--lr=0.01", "--deep", "--opt=adam",
    ]  # fmt: skip
    assert expand(["run", "${args_no_hyphens}", "--cfg=${args_json_file}"], params, **kw) == [
        "run", "lr=0.01", "deep=True", "wide=False", "opt=adam", "--cfg=/t/p.json",
    ]  # fmt: skip
    # No args macro: the params are appended.
    assert expand(["/py", "a.py", "--epochs=5"], {"lr": 0.1}, **kw) == [
        "/py", "a.py", "--epochs=5", "--lr=0.1",
    ]  # fmt: skip
    # args_json alone places the params too; envvar reads the worker's environment.
    out = expand(
        ["x", "${args_json}", "${envvar:HOME_X}"], {"a": 1}, environ={"HOME_X": "/h"}, **kw
    )
    assert out == ["x", '{"a": 1}', "/h"]


@pytest.mark.parametrize(
    ("command", "program", "message"),
    [
        (["${python}", "a.py"], None, r"command\[0\]: unknown macro \$\{python\}"),
        (["x", "--a=${args}"], None, r"command\[1\]: \$\{args\} expands to several"),
        (["x", "${program}"], None, "trainer.program: required"),
        (["x", "${args"], None, "unterminated macro"),
        (["x", "${envvar:}"], None, "expected"),
        ([], None, "must not be empty"),
    ],
)
def test_bad_commands_are_named(command, program, message):
    with pytest.raises(SpecError, match=message):
        check_command(command, program)


def test_missing_files_are_found_before_a_run(tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "task.py").write_text("")
    assert missing_files(["${interpreter}", "train.py"], None, tmp_path) == []
    assert missing_files(["${interpreter}", "${program}"], "train.py", tmp_path) == []
    assert missing_files(["${interpreter}", "-m", "pkg.task"], None, tmp_path) == []
    assert missing_files(["${interpreter}", "nope.py"], None, tmp_path) == [
        f"nope.py not found in {tmp_path}"
    ]
    assert missing_files(["${interpreter}", "-m", "pkg.other"], None, tmp_path) == [
        f"module pkg.other not found in {tmp_path}"
    ]
    assert missing_files([sys.executable, "-c", "pass"], None, tmp_path) == []
    assert missing_files(["./run.sh"], None, tmp_path) == [f"./run.sh not found in {tmp_path}"]


def test_program_mode_in_the_spec():
    base = {"name": "p", "trainer": {"program": "train.py"}}
    s = spec_from_dict(base)
    assert s.trainer.command_line == ["${interpreter}", "${program}", "${args}"]
    with pytest.raises(SpecError, match=r"trainer.command\[1\]: unknown macro"):
        spec_from_dict({"name": "p", "trainer": {"command": ["python", "${prog}"]}})
    with pytest.raises(SpecError, match="trainer.metrics.path: a path inside the trial dir"):
        spec_from_dict(
            {**base, "trainer": {"program": "t.py", "metrics": {"collector": "file", "path": "/x"}}}
        )
    with pytest.raises(SpecError, match="trainer.metrics.collector: unknown value 'neptune'"):
        spec_from_dict(
            {**base, "trainer": {"program": "t.py", "metrics": {"collector": "neptune"}}}
        )
    # A native spec may pick the W&B collector (its scripts log with wandb.log).
    spec = spec_from_dict(
        {**base, "trainer": {"program": "t.py", "metrics": {"collector": "wandb"}}}
    )
    assert spec.trainer.metrics.collector == "wandb"


class _Answers:
    """A broker whose `report.remote` hands back a token; `ray.get` (patched) reads the answer,
    counting the waits."""

    def __init__(self, answers: dict[int, Decision]) -> None:
        self.answers, self.waits = answers, []
        self.report = self

    def remote(self, lane: str, seq: int, step: int, metrics: dict, persist: bool) -> int:
        return step

    def get(self, step: int) -> tuple[Decision, bool]:
        self.waits.append(step)
        return self.answers[step], False


@pytest.mark.parametrize("prunes", [True, False])
def test_a_report_waits_for_its_answer_only_where_it_can_prune(ctx, monkeypatch, prunes):
    """With a pruner every report waits for its answer. Without one (one worker) the answer can
    only be "cancelled": the next epoch trains meanwhile, and reads it at the next report."""
    import ray

    broker = _Answers({1: Decision.CONTINUE, 2: Decision.CANCEL, 3: Decision.CONTINUE})
    monkeypatch.setattr(ray, "get", broker.get)
    ctx.broker, ctx.prunes = broker, prunes
    runtime.report({"acc": 0.1})
    assert broker.waits == ([1] if prunes else [])
    if prunes:
        with pytest.raises(runtime.TrialPruned, match="cancelled at step 2"):
            runtime.report({"acc": 0.2})
        return
    runtime.report({"acc": 0.2})  # reads step 1's answer: go on
    with pytest.raises(runtime.TrialPruned, match="cancelled at step 2"):
        runtime.report({"acc": 0.3})  # step 2's answer stops the trial before step 3 goes
    assert broker.waits == [1, 2]


def test_a_report_that_persists_a_checkpoint_waits_for_its_answer(ctx, monkeypatch):
    """The driver must record checkpoint k before checkpoint k+1 exists (Ray Train deletes all
    but the newest few): an epoch that persists one waits, pruner or not."""
    import ray

    broker = _Answers({1: Decision.CONTINUE, 2: Decision.CONTINUE, 3: Decision.CONTINUE})
    monkeypatch.setattr(ray, "get", broker.get)
    monkeypatch.setattr(runtime, "_persist", lambda *a: None)
    ctx.broker, ctx.prunes = broker, False
    runtime.report({"acc": 0.1})  # nothing to persist: not waited for
    assert broker.waits == []
    runtime.report({"acc": 0.2}, checkpoint_dir="/saved")
    assert broker.waits == [1, 2], "the answer still out, then its own, at once"
    runtime.report({"acc": 0.3})
    assert broker.waits == [1, 2], "the next one goes on without waiting again"


def test_a_cancel_still_out_stops_a_report_that_persists(ctx, monkeypatch):
    """The answer an epoch late is read before the next report goes, checkpoint or not: a
    cancelled trial does not send (or save) another epoch."""
    import ray

    broker = _Answers({1: Decision.CANCEL, 2: Decision.CONTINUE})
    monkeypatch.setattr(ray, "get", broker.get)
    monkeypatch.setattr(runtime, "_persist", lambda *a: pytest.fail("saved after a cancel"))
    ctx.broker, ctx.prunes = broker, False
    runtime.report({"acc": 0.1})
    with pytest.raises(runtime.TrialPruned, match="cancelled at step 1"):
        runtime.report({"acc": 0.2}, checkpoint_dir="/saved")
    assert broker.waits == [1]
