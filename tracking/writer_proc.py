"""The tracker's writes in a child process: the driver's loop and MLflow's writer stop sharing
one GIL.

In a sweep of short trials the driver's two threads took turns: Optuna on the loop, MLflow's
SQLAlchemy on the writer thread, each about half of every trial (1,000 tiny trials: 62 ms per
trial with MLflow writing in-process, 32 ms without). Here the writer thread lives in a child
process with an `MLflowTracker` of its own; the driver sends it, in order, what it would have
queued on its own thread, and the child sends back the ids of the runs it creates.

The child is the driver's, not Ray's: it inherits the driver's environment (store credentials
never appear in a Ray runtime env or the dashboard) and it writes to the stores the driver
would. It runs in a session of its own, so signals meant for the driver's process group (the
terminal's Ctrl-C, a Ray job's stop) leave it be: it writes what it was sent until the driver
closes the pipe, or dies, so nothing already recorded is lost. Should the child die, the driver
writes in-process again, and the sweep's errors say which writes may be missing.

Frames on both pipes are pickles, one per message:
    driver -> child   ("submit", ref, args, kw) | ("op", name, args, {})
                      | ("call", id, name, args) | ("flush", id) | ("close", id)
    child -> driver   ("created", trial_id, run_id) | ("reply", id, errors)
                      | ("result", id, value, error)  (a "call": the sweep's parent run ids)
                      | ("mark", monotonic time, name, detail)  (timeline events)
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, BinaryIO

from sweeps.common import timeline
from sweeps.common.errors import one_line

# The child starts with the driver's sys.path, so it imports the same `tracking` (and finds the
# user's code_dir, which the runner put on the path) wherever the driver was started from.
# Quiet before MLflow is imported (it reads its log level from the environment then); the
# tracker class is handed in, so this module does not import the one that imports it.
_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from sweeps.common.quietlogs import quiet; quiet(); "
    "from tracking.tracker import MLflowTracker; from tracking.writer_proc import child_main; "
    "child_main(MLflowTracker, sys.argv[2], sys.argv[3])"
)


class RemoteWriter:
    """The driver's end: sends writes to the child, receives created runs and replies."""

    def __init__(
        self,
        uri: str,
        artifact_root: str | None,
        on_created: Callable[[int, str], None],
        fork: Any = None,
    ) -> None:
        """`fork`: how a driver forked by the service's zygote has the zygote fork the writer
        too, its imports done (tracking.writer_fork); else, or if that fails, a new process."""
        from tracking import writer_fork

        self.on_created = on_created
        self.proc: Any = writer_fork.start(fork, uri, artifact_root) or subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps(sys.path), uri, artifact_root or ""],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # Out of the driver's process group: Ctrl-C at the terminal and a Ray job's stop
            # (SIGTERM, then SIGKILL, to the group) end the driver, and the child still writes
            # what it was sent, ending when the pipe closes.
            start_new_session=True,
        )
        self._send_lock = threading.Lock()
        self._replies: dict[int, queue.SimpleQueue[list[str]]] = {}
        self._results: dict[int, Future[Any]] = {}
        self._next_id = 0
        self._dead: str | None = None
        self.blocking_s = 0.0  # time the driver waited to hand writes over (a full pipe)
        self._reader = threading.Thread(target=self._read, name="mlflow-writer-in", daemon=True)
        self._reader.start()

    def alive(self) -> bool:
        return self._dead is None

    def send(self, msg: tuple[Any, ...]) -> bool:
        """Hand a write to the child; False if it is gone (the caller writes it itself)."""
        if self._dead is not None:
            return False
        try:  # whole frames only: a write that cannot be pickled must not corrupt the pipe
            data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            try:  # what a user's code returned (a dataset description) may need cloudpickle
                import cloudpickle

                data = cloudpickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                return False  # written in this process instead
        t0 = time.perf_counter()
        try:
            with self._send_lock:
                assert self.proc.stdin is not None
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError) as e:
            self._died(f"the MLflow writer process is gone ({one_line(e, 200)})")
            return False
        finally:
            self.blocking_s += time.perf_counter() - t0

    def _new_id(self) -> int:
        with self._send_lock:
            self._next_id += 1
            return self._next_id

    def call(self, name: str, *args: Any) -> Future[Any]:
        """The child runs `tracker.name(*args)` in order with the writes around it; its return
        value (or error) comes back in the future, which fails if the child is gone."""
        fut: Future[Any] = Future()
        call_id = self._new_id()
        self._results[call_id] = fut
        if not self.send(("call", call_id, name, args)):
            self._results.pop(call_id, None)
            fut.set_exception(RuntimeError(self._dead or "the MLflow writer process is gone"))
        return fut

    def _ask(self, kind: str, timeout: float) -> list[str]:
        call_id = self._new_id()
        box: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        self._replies[call_id] = box
        if not self.send((kind, call_id)):
            return self._lost()
        try:
            return box.get(timeout=timeout)
        except queue.Empty:
            return [f"the MLflow writer process did not finish its writes in {timeout:g} s"]
        finally:
            self._replies.pop(call_id, None)

    def flush(self, timeout: float = 600) -> list[str]:
        """Wait until the child has written everything sent so far; its errors."""
        if self._dead is not None:
            return self._lost()
        return self._ask("flush", timeout)

    def close(self, timeout: float = 600) -> list[str]:
        errors = self._ask("close", timeout) if self._dead is None else self._lost()
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self._reader.join(timeout=5)
        return errors

    def _lost(self) -> list[str]:
        return [f"{self._dead}: writes sent to it before then may be missing"]

    def _died(self, why: str) -> None:
        if self._dead is None:
            self._dead = why
        for box in list(self._replies.values()):
            box.put(self._lost())
        for call_id in list(self._results):
            fut = self._results.pop(call_id, None)
            if fut is not None and not fut.done():
                fut.set_exception(RuntimeError(why))

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            try:
                msg = pickle.load(out)
            except (EOFError, OSError, pickle.UnpicklingError):
                code = self.proc.poll()
                if code not in (None, 0):
                    self._died(f"the MLflow writer process exited with code {code}")
                else:
                    self._died("the MLflow writer process ended")
                return
            if msg[0] == "created":
                self.on_created(msg[1], msg[2])
            elif msg[0] == "mark":
                timeline.current().mark_at(msg[1], msg[2], **msg[3])
            elif msg[0] == "reply":
                box = self._replies.get(msg[1])
                if box is not None:
                    box.put(msg[2])
            elif msg[0] == "result":
                fut = self._results.pop(msg[1], None)
                if fut is not None and msg[3] is None:
                    fut.set_result(msg[2])
                elif fut is not None:
                    fut.set_exception(RuntimeError(msg[3]))


def child_main(tracker_class: Any, uri: str, artifact_root: str) -> None:
    """The child: one `MLflowTracker` (its writer thread does the writing), fed from stdin."""
    # The protocol keeps the real stdout; anything a library prints goes to stderr.
    proto: BinaryIO = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inbox: BinaryIO = os.fdopen(os.dup(0), "rb")
    tracker = tracker_class(uri, artifact_root or None)
    # MLflow imported (and a new store's schema made) here, before two threads could import
    # it at once: concurrent first imports of mlflow fail as "partially initialized".
    _ = tracker.client
    lock = threading.Lock()  # orders created runs before replies
    done = threading.Event()
    send = _frame_sender(proto)
    _forward_marks(send)
    forwarder = threading.Thread(
        target=_forward_created, args=(tracker, lock, done, send), name="created", daemon=True
    )
    forwarder.start()
    # The pipe is read as fast as the driver writes: while this loop makes the parent run
    # (MLflow's import, a new store's schema: ~1.5 s), a trial's end with its model would fill
    # the pipe's 64 KB and the driver would wait on it (it did, 1.6 s, in a warm sweep).
    inbound: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threading.Thread(target=_read_inbox, args=(inbox, inbound), name="inbox", daemon=True).start()
    try:
        _serve(tracker, inbound, lock, send)
    finally:
        tracker.flush()
        _drain_created(tracker, lock, send)
        done.set()
        forwarder.join(timeout=1)
        tracker.writer.pool.shutdown(wait=True)
        proto.close()
    # Everything sent is written and committed, and the pipe is closed: the interpreter's own
    # teardown (MLflow, SQLAlchemy and their threads: 0.67-0.82 s) was the last thing every
    # sweep's end waited for, so it is skipped.
    sys.stderr.flush()
    os._exit(0)


def _frame_sender(proto: BinaryIO) -> Callable[[tuple[Any, ...]], None]:
    """The child's one way to write to the driver: whole frames, from any thread."""
    send_lock = threading.Lock()

    def send(msg: tuple[Any, ...]) -> None:
        try:
            with send_lock:
                pickle.dump(msg, proto, protocol=pickle.HIGHEST_PROTOCOL)
                proto.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the driver is gone: what matters now is writing what it sent

    return send


def _forward_marks(send: Callable[[tuple[Any, ...]], None]) -> None:
    """Timeline events made in the child go onto the driver's timeline."""

    def forward_mark(name: str, **detail: Any) -> float:
        send(("mark", time.monotonic(), name, detail))
        return 0.0

    timeline.current().mark = forward_mark  # type: ignore[method-assign]


def _forward_created(
    tracker: Any,
    lock: threading.Lock,
    done: threading.Event,
    send: Callable[[tuple[Any, ...]], None],
) -> None:
    """Thread: sends each run the tracker creates to the driver as soon as it exists."""
    while not done.is_set():
        with lock:  # held while waiting, so a reply never overtakes a run it created
            try:  # a flush's reply waits for this wait to end: kept short
                trial_id, run_id = tracker._created.get(timeout=0.01)
            except queue.Empty:
                continue
            send(("created", trial_id, run_id))


def _drain_created(
    tracker: Any, lock: threading.Lock, send: Callable[[tuple[Any, ...]], None]
) -> None:
    """Sends every created run not yet forwarded: done before each reply, and at the end."""
    with lock:
        for trial_id, run_id in tracker.created_runs():
            send(("created", trial_id, run_id))


def _read_inbox(inbox: BinaryIO, inbound: queue.SimpleQueue[Any]) -> None:
    """Thread: moves the driver's frames off the pipe; None once it closes or the driver dies."""
    while True:
        try:
            inbound.put(pickle.load(inbox))
        except (EOFError, OSError, pickle.UnpicklingError):
            inbound.put(None)  # the driver closed the pipe, or died
            return


def _serve(
    tracker: Any,
    inbound: queue.SimpleQueue[Any],
    lock: threading.Lock,
    send: Callable[[tuple[Any, ...]], None],
) -> None:
    """Carries out the driver's messages in order until it closes the pipe or says "close"."""
    while True:
        msg = inbound.get()
        if msg is None:
            break  # write what was sent, then stop
        kind = msg[0]
        try:
            if kind == "submit":
                _, (where, what), args, kw = msg
                owner = tracker if where == "tracker" else tracker.client
                fn = what if where == "fn" else getattr(owner, what)
                tracker.writer.submit(fn, *args, **kw)
            elif kind == "op":
                getattr(tracker, msg[1])(*msg[2])
            elif kind == "call":
                try:
                    send(("result", msg[1], getattr(tracker, msg[2])(*msg[3]), None))
                except Exception as e:  # the caller decides what it means
                    send(("result", msg[1], None, one_line(e, 500)))
        except Exception as e:  # reported at flush, like a write that failed
            tracker.writer.errors.append(f"{kind} {msg[1]!r:.80}: {one_line(e, 300)}")
        if kind in ("flush", "close"):
            errors = tracker.flush()
            _drain_created(tracker, lock, send)
            with lock:
                send(("reply", msg[1], errors))
            if kind == "close":
                break
