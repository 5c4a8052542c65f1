"""What the user reads of a driver's log and of a sweep's end: the sweep's lines, not Ray's."""

from sweeps.quietlogs import DriverLogFilter
from sweeps.summary import counts_text

LOG = (
    "2026-12-03 16:53:15,286\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
    "Running entrypoint for job sweeps-qs-79ac26: python -m sweeps.jobs .sweeps-spec.yaml\n"
    "\x1b[33m(raylet)\x1b[0m WARNING: 8 PYTHON worker processes have been started on node: x\n"
    "note: 2 trials left RUNNING by a dead driver were re-queued\n"
    "qs: finished (budget reached: 12/12 trials); complete 9, pruned 3\n"
)


def test_driver_log_keeps_the_sweep_and_drops_ray_lines_split_anywhere() -> None:
    want = (
        "note: 2 trials left RUNNING by a dead driver were re-queued\n"
        "qs: finished (budget reached: 12/12 trials); complete 9, pruned 3\n"
    )
    for size in (1, 7, 50, len(LOG)):  # chunk boundaries fall mid-line
        f = DriverLogFilter()
        got = "".join(f.feed(LOG[i : i + size]) for i in range(0, len(LOG), size)) + f.close()
        assert got == want, size


def test_driver_log_unterminated_last_line_and_verbose() -> None:
    f = DriverLogFilter()
    assert f.feed("qs: running") == ""
    assert f.close() == "qs: running"
    assert DriverLogFilter(keep_all=True).feed(LOG) == LOG


def test_counts_text() -> None:
    assert counts_text({"PRUNED": 3, "COMPLETE": 9}) == "complete 9, pruned 3"
    assert counts_text({}) == "no trials"
