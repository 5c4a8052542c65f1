"""The local service's resident sweep host: a sweep submitted on this machine (no code to ship)
starts as a fork of the service's zygote, its imports done, instead of as a Ray Job.

Through Ray Jobs the first trial of a warm sweep started 5-8 s after `submit` on 2 CPUs: Ray
starts a supervisor actor for the job, which starts `python -m sweeps.jobs` (a fresh interpreter
importing our modules), which asks the zygote for the driver. Here `submit` hands the job's
folder to the zygote over its socket, and the zygote forks the job's supervisor
(`sweeps.jobs --dir DIR SPEC`, restarts included) at once; its driver is forked the same way.
Ray Jobs stays the way to run drivers on a remote cluster, and for sweeps that ship code.

What Ray Jobs kept for a job is kept in SWEEPS_HOME/service/sweeps/JOB_ID (owner-only): the
driver's log (`sweeps logs --driver`), the supervisor's pid (`sweeps cancel` stops it), its exit
code and whether it was stopped (the job's status, as Ray names it). A sweep hosted here records
`names.SWEEPHOST_ADDRESS` as its job address, which routes those commands here.

    python -m sweeps.service.sweephost RECORD_DIR MODULE ARGV...   (run by the zygote's fork)
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sweeps.common import names, paths

ADDRESS = names.SWEEPHOST_ADDRESS
# Set to 0, `sweeps submit` sends a local sweep through Ray Jobs as before (a bench's baseline).
ENV_SWITCH = "SWEEPS_SWEEP_HOST"
LOG, PID, EXIT, STOPPED = "driver.log", "pid", "exit", "stopped"


def record_dir(job_id: str) -> Path:
    return paths.home() / "service" / "sweeps" / job_id


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0" and paths.zygote_socket().exists()


def submit(argv: list[str], job_id: str) -> bool:
    """The job's supervisor, `python -m sweeps.jobs ARGV` (`--dir` its folder), forked by the
    service's zygote with the job's log as its output. False if no zygote answers."""
    from sweeps.service import zygote

    rec = record_dir(job_id)
    rec.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    rec.mkdir(mode=0o700)
    log = os.open(rec / LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        forked = zygote.spawn(
            str(paths.zygote_socket()),
            names.SWEEPHOST_MODULE,
            [str(rec), names.JOBS_MODULE, *argv],
            stdio=[null, log, log],
            detach=True,
        )
    finally:
        os.close(log)
        os.close(null)
    if forked is None:
        import shutil

        shutil.rmtree(rec, ignore_errors=True)
        return False
    forked.conn.close()
    (rec / PID).write_text(str(forked.pid))  # here too: a fork that fails at once is no PENDING
    return True


def submit_recorded(
    argv: list[str], job_id: str, storage: str, record: Callable[[], object]
) -> bool:
    """`submit`, with `record()` marking the sweep queued in its store: while the driver starts
    (the two overlap; the driver's heartbeat wins), or first where a SQLite store is not there
    yet (two processes making its schema at once collide). A record that fails stops the job:
    a store this side cannot write, the driver cannot either."""
    fresh = storage.startswith("sqlite:///") and not os.path.exists(storage[len("sqlite:///") :])
    if fresh:
        record()
    if not submit(argv, job_id):
        return False
    try:
        if not fresh:
            record()
    except BaseException:
        stop(job_id)
        raise
    return True


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _alive(pid: str | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError):
        return False
    # A zombie is gone for our purposes (its exit code is in EXIT, or it had none).
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def status(job_id: str) -> str | None:
    """The job's status as Ray Jobs names it (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED);
    None if this host never had it."""
    rec = record_dir(job_id)
    if not rec.exists():
        return None
    rc = _read(rec / EXIT)
    if rc is not None:
        # 130 and 143: the driver ended its sweep interrupted or cancelled, as asked.
        if (rec / STOPPED).exists() or rc in ("130", "143"):
            return "STOPPED"
        return "SUCCEEDED" if rc == "0" else "FAILED"
    pid = _read(rec / PID)
    if pid is None:
        return "PENDING"
    return "RUNNING" if _alive(pid) else ("STOPPED" if (rec / STOPPED).exists() else "FAILED")


def stop(job_id: str, wait_s: float = 0.0) -> bool:
    """SIGTERM to the job's supervisor, which passes it to its driver (as Ray's stop_job),
    after up to `wait_s` for it to end by itself (a cancelled driver's last lines)."""
    rec = record_dir(job_id)
    end = time.monotonic() + wait_s
    while time.monotonic() < end and status(job_id) == "RUNNING":
        time.sleep(0.2)
    pid = _read(rec / PID)
    if not _alive(pid):
        return False
    (rec / STOPPED).touch()
    with contextlib.suppress(OSError):
        os.kill(int(pid or 0), signal.SIGTERM)
    return True


def logs(job_id: str, follow: bool, poll_s: float = 0.25) -> Iterator[str]:
    """The driver's log, whole, then (follow) as it grows until the job ends."""
    rec = record_dir(job_id)
    try:
        f = open(rec / LOG, errors="replace")  # noqa: SIM115 (read while it grows)
    except OSError:
        yield ""
        return
    with f:
        yield f.read()
        while follow:
            ended = status(job_id) not in ("PENDING", "RUNNING")
            chunk = f.read()
            if chunk:
                yield chunk
            elif ended:
                return
            else:
                time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    """In the zygote's fork: record this pid, run `python -m MODULE ARGV...` here (as the
    zygote's child already does for a driver), then record its exit code."""
    import runpy

    args = list(sys.argv[1:] if argv is None else argv)
    rec, module, rest = Path(args[0]), args[1], args[2:]
    (rec / PID).write_text(str(os.getpid()))
    rc = 1
    try:
        sys.argv = [module, *rest]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        rc = 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        tmp = rec / (EXIT + ".tmp")
        tmp.write_text(str(rc))
        tmp.replace(rec / EXIT)
    return rc


if __name__ == "__main__":
    sys.exit(main())
