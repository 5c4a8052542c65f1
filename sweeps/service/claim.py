"""Two services on one store refuse each other: `sweeps up` claims the stores it writes (the
Optuna storage and MLflow's backend), and a second service pointed at one of them stops before
it starts anything, with one line naming the first (where it runs, since when).

The claim is a lease that a small process of the service holds for as long as the service runs
(`python -m sweeps.service.claim`), so a killed service loses it with no one to clean up:

- SQLite: an exclusive `flock` on a file beside the database (`optuna.db.sweeps-service`); the
  kernel drops it with the process. The file also holds the holder's record (home, host, pid,
  since), which names the first service to the second; a record left by a holder that was
  killed (no lock on it) is taken over, saying so.
- PostgreSQL: a session advisory lock in that database (`pg_try_advisory_lock`), which the
  server drops with the connection; the holder's record is a row of a one-row table there
  (`sweeps_service_claim`), taken over the same way.

MLflow behind an HTTP server is that server's to guard, and other stores are not claimed.
The holder lets go when `sweeps down` stops it, or by itself once neither the service's Ray head
(its record under SWEEPS_HOME) nor the `up` that started it runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sweeps.common import names
from sweeps.common.errors import ServiceError, SpecError, one_line

POLL_S = 1.0  # how soon a holder notices that its service is gone


@dataclass(frozen=True)
class Holder:
    """Who holds a claim: the service of `home` on `host`, its claim process `pid`, since."""

    home: str
    host: str
    pid: int
    since: float

    @staticmethod
    def parse(raw: str | bytes | None) -> Holder | None:
        """A record as written by `record`; None for none, or one that cannot be read."""
        try:
            return Holder(**json.loads(raw or ""))
        except (ValueError, TypeError):
            return None

    def text(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return f"the sweeps service of {self.home} on {self.host} (pid {self.pid}), up since {when}"


@dataclass(frozen=True)
class Target:
    """One store to claim: `kind` "sqlite" (`where` is the lock file) or "postgresql" (`where`
    is the SQLAlchemy URL); `label` names it in messages, without credentials."""

    kind: str
    where: str
    label: str


def targets(urls: list[str]) -> list[Target]:
    """The stores among these URLs that a service claims, each once (one database named two ways
    is one store)."""
    out: dict[str, Target] = {}
    for url in urls:
        scheme = url.split(":", 1)[0].split("+", 1)[0]
        if scheme == "sqlite" and url.startswith("sqlite:///") and ":memory:" not in url:
            db = Path(url[len("sqlite:///") :].split("?", 1)[0]).expanduser().resolve()
            out.setdefault(str(db), Target("sqlite", f"{db}{names.CLAIM_SUFFIX}", str(db)))
        elif scheme == "postgresql":
            from sqlalchemy.engine import make_url

            u = make_url(url)
            key = f"{u.host or 'localhost'}:{u.port or 5432}/{u.database}"
            out.setdefault(key, Target("postgresql", url, f"postgresql://{key}"))
    return list(out.values())


def verdict(target: Target, me: Holder, found: Holder | None, locked: bool) -> tuple[str, str]:
    """What to do about one store: ("refuse", the line), ("take", a warning: a claim whose
    holder is gone) or ("take", "")."""
    if locked:
        who = found.text() if found else "another sweeps service"
        return "refuse", (
            f"store {target.label} is claimed by {who}: two services on one store would run each "
            "other's sweeps; stop that one (`sweeps down` with its SWEEPS_HOME) or point this one "
            "at other stores (SWEEPS_STORAGE, MLFLOW_TRACKING_URI)"
        )
    if found and (found.home, found.host, found.pid) != (me.home, me.host, me.pid):
        return "take", (
            f"warning: store {target.label}: taking over the claim of {found.text()}, "
            "whose service is gone"
        )
    return "take", ""


def keep_holding(service_alive: bool, up_alive: bool) -> bool:
    """A holder lets go once neither its service nor the `up` still starting it runs."""
    return service_alive or up_alive


class _SqliteLease:
    def __init__(self, target: Target) -> None:
        import fcntl

        Path(target.where).parent.mkdir(parents=True, exist_ok=True)  # a new store's folder
        self.fd = os.open(target.where, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.held = True
        except BlockingIOError:
            self.held = False
        self.found = self._read()

    def _read(self) -> Holder | None:
        with contextlib.suppress(OSError):
            return Holder.parse(os.pread(self.fd, 65536, 0))
        return None

    def record(self, me: Holder) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, json.dumps(asdict(me)).encode(), 0)

    def release(self) -> None:
        if self.held:
            os.ftruncate(self.fd, 0)  # let go cleanly: no stale record for the next service
        os.close(self.fd)


class _PostgresLease:
    """A session advisory lock in the database, and the holder's record in a one-row table
    there (written only by whoever holds the lock; a killed holder's row is left behind)."""

    def __init__(self, target: Target) -> None:
        from sqlalchemy import create_engine, text

        self.conn = create_engine(target.where).connect()
        key = {"k": names.CLAIM_PG_KEY}
        self.held = bool(self.conn.execute(text("SELECT pg_try_advisory_lock(:k)"), key).scalar())
        self.conn.commit()
        self.found = self._read()

    def _read(self) -> Holder | None:
        from sqlalchemy import exc, text

        try:
            raw = self.conn.execute(text(f"SELECT holder FROM {_TABLE} WHERE id = 1")).scalar()
            self.conn.commit()
        except exc.DBAPIError:  # no table yet: never claimed
            self.conn.rollback()
            return None
        return Holder.parse(raw)

    def record(self, me: Holder) -> None:
        from sqlalchemy import text

        self.conn.execute(
            text(f"CREATE TABLE IF NOT EXISTS {_TABLE} (id int PRIMARY KEY, holder text)")
        )
        self.conn.execute(
            text(f"INSERT INTO {_TABLE} VALUES (1, :h) ON CONFLICT (id) DO UPDATE SET holder = :h"),
            {"h": json.dumps(asdict(me))},
        )
        self.conn.commit()

    def release(self) -> None:
        from sqlalchemy import text

        if self.held:  # let go cleanly: no stale record for the next service
            with contextlib.suppress(Exception):
                self.conn.execute(text(f"DELETE FROM {_TABLE} WHERE id = 1"))
                self.conn.commit()
        self.conn.close()  # the lock goes with the session


_TABLE = names.CLAIM_PG_TABLE


def _acquire(stores: list[Target], me: Holder) -> tuple[list[Any], list[str]]:
    """Take every store, or none: returns the leases and the warnings; refusal is a SpecError,
    a store that cannot be reached a ServiceError."""
    leases: list[Any] = []
    warnings = []
    try:
        for t in stores:
            try:
                lease = _SqliteLease(t) if t.kind == "sqlite" else _PostgresLease(t)
            except Exception as e:
                raise ServiceError(f"store {t.label}: cannot claim it: {one_line(e)}") from None
            leases.append(lease)
            what, line = verdict(t, me, lease.found, locked=not lease.held)
            if what == "refuse":
                raise SpecError(line)
            if line:
                warnings.append(line)
        for lease in leases:
            lease.record(me)
    except BaseException:
        for lease in leases:
            with contextlib.suppress(Exception):
                lease.release()
        raise
    return leases, warnings


def _service_alive(home: Path) -> bool:
    """Whether the service recorded under `home` still runs (its Ray head)."""
    from sweeps.service import daemons

    try:
        info = json.loads((home / "service" / "service.json").read_text())
    except (OSError, ValueError):
        return False
    return daemons.alive(info.get("ray_pid"))


def _hold(home: Path, up_pid: int, urls: list[str]) -> int:
    """The holder process: say "ok" (after any warnings) or "refused: LINE" on stdout, then
    hold the claim while the service runs."""
    from sweeps.service import daemons

    # `down` (SIGTERM) lets go cleanly, from the start: a claim taken, then a SIGTERM before
    # the handler was set, left its record behind as if its holder had been killed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    me = Holder(str(home), socket.gethostname(), os.getpid(), time.time())
    try:
        leases, warnings = _acquire(targets(urls), me)
    except SpecError as e:
        print(f"refused: {e}", flush=True)
        return 2
    except ServiceError as e:
        print(f"failed: {e}", flush=True)
        return 1
    try:
        print(*warnings, "ok", sep="\n", flush=True)
        with open(os.devnull, "w") as null:  # `up` has read its answer and is gone
            os.dup2(null.fileno(), sys.stdout.fileno())
        while keep_holding(_service_alive(home), daemons.alive(up_pid)):
            time.sleep(POLL_S)
    finally:
        for lease in leases:
            with contextlib.suppress(Exception):
                lease.release()
    return 0


def hold(home: Path, urls: list[str], log: Path) -> int | None:
    """Claim the stores at these URLs for the service of `home`, before it starts anything:
    returns the holder's pid (None: nothing to claim); another service's claim is a SpecError
    naming it (exit 2), and a stale one is taken over with a warning on stderr."""
    if not targets(urls):
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", names.CLAIM_MODULE, str(home), str(os.getpid()), *urls]
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
        )
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        if line == "ok":
            proc.stdout.close()
            return proc.pid
        if line.startswith("refused: "):
            proc.wait()
            raise SpecError(line[len("refused: ") :])
        if line.startswith("failed: "):
            proc.wait()
            raise ServiceError(line[len("failed: ") :])
        print(line, file=sys.stderr, flush=True)
    proc.wait()
    raise ServiceError(f"the claim on the service's stores failed; see {log}")


if __name__ == "__main__":
    sys.exit(_hold(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]))
