"""The sweep's state, as explicit classes changed in one place (`SweepStatus`).

    Running ──drain(reason)──> Draining ──(lanes gone)──> Finished | Stopped | Paused | Failed | ...
       └────cancel(reason)──> Cancelling ─(lanes gone)──> Cancelled | Interrupted | Failed | Stopped

Draining: no new trials, running ones finish. Cancelling: running trials are stopped at their
next report and recorded FAIL. Each drain/cancel says how the sweep will end (`ends_as`); when
several happen, the most serious ending wins (an interrupt outranks a failure limit, which
outranks a money limit), while the first reason to stop launching is the one reported.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar


class Ending(StrEnum):
    """How a sweep ends, least to most serious."""

    FINISHED = "finished"
    STOPPED = "stopped"
    PAUSED = "paused"  # `sweeps pause`: running trials parked at a checkpoint; resumable
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


DRAIN_ON_INTERRUPT = "interrupted: finishing running trials (Ctrl-C again cancels)"
AFTER_DRAIN = {
    DRAIN_ON_INTERRUPT: "interrupted (Ctrl-C): running trials finished, no new ones started",
}

ENDINGS = tuple(Ending)


@dataclass(frozen=True)
class SweepState:
    name: ClassVar[str]
    launching: ClassVar[bool] = False  # may new trials start?
    cancelling: ClassVar[bool] = False  # are running trials being stopped?
    terminal: ClassVar[bool] = False
    reason: str = ""


@dataclass(frozen=True)
class Running(SweepState):
    name: ClassVar[str] = "running"
    launching: ClassVar[bool] = True


@dataclass(frozen=True)
class Draining(SweepState):
    name: ClassVar[str] = "draining"
    ends_as: Ending = Ending.FINISHED


@dataclass(frozen=True)
class Cancelling(SweepState):
    name: ClassVar[str] = "cancelling"
    cancelling: ClassVar[bool] = True
    ends_as: Ending = Ending.CANCELLED


@dataclass(frozen=True)
class Finished(SweepState):
    name: ClassVar[str] = "finished"
    terminal: ClassVar[bool] = True


@dataclass(frozen=True)
class Stopped(SweepState):
    """Ended early by a person or a hard limit: `sweeps stop`, or a hard budget that cancelled
    running trials. A budget reached (trials, money, GPU-hours, time) is `finished`."""

    name: ClassVar[str] = "stopped"
    terminal: ClassVar[bool] = True


@dataclass(frozen=True)
class Paused(SweepState):
    """`sweeps pause`: running trials parked at their checkpoints; `sweeps resume` goes on."""

    name: ClassVar[str] = "paused"
    terminal: ClassVar[bool] = True


@dataclass(frozen=True)
class Failed(SweepState):
    name: ClassVar[str] = "failed"
    terminal: ClassVar[bool] = True


@dataclass(frozen=True)
class Cancelled(SweepState):
    name: ClassVar[str] = "cancelled"
    terminal: ClassVar[bool] = True


@dataclass(frozen=True)
class Interrupted(SweepState):
    name: ClassVar[str] = "interrupted"
    terminal: ClassVar[bool] = True


TERMINAL: dict[Ending, type[SweepState]] = {
    Ending(c.name): c for c in (Finished, Stopped, Paused, Failed, Cancelled, Interrupted)
}


def _worse(a: Ending, b: Ending) -> Ending:
    return a if ENDINGS.index(a) >= ENDINGS.index(b) else b


class SweepStatus:
    """Owns the current state; every change of it goes through these methods."""

    def __init__(self) -> None:
        self.state: SweepState = Running()
        self.interrupts = 0

    @property
    def launching(self) -> bool:
        return self.state.launching

    @property
    def cancelling(self) -> bool:
        return self.state.cancelling

    @property
    def reason(self) -> str:
        return self.state.reason

    def _ends_as(self) -> Ending | None:
        return getattr(self.state, "ends_as", None)

    def drain(self, reason: str, ends_as: Ending = Ending.FINISHED) -> None:
        """Start no more trials. The first reason stays; the ending may only get worse."""
        if self.state.terminal:
            return
        ends_as = Ending(ends_as)
        if isinstance(self.state, Running):
            self.state = Draining(reason, ends_as)
        elif isinstance(self.state, Draining):
            self.state = Draining(self.state.reason, _worse(ends_as, self.state.ends_as))
        elif isinstance(self.state, Cancelling):
            self.state = Cancelling(self.state.reason, _worse(ends_as, self.state.ends_as))

    def cancel(self, reason: str, ends_as: Ending = Ending.CANCELLED) -> None:
        """Stop running trials too. Cancelling's reason replaces a drain's: it is what happened
        to the trials in flight."""
        if self.state.terminal:
            return
        ends_as = Ending(ends_as)
        before = self._ends_as() or ends_as
        if isinstance(self.state, Cancelling):
            self.state = Cancelling(self.state.reason, _worse(ends_as, before))
        else:
            self.state = Cancelling(reason, _worse(ends_as, before))

    def restate(self, reason: str) -> None:
        """Say at the end what only the end knows (how many trials a pause parked); the
        state itself does not change."""
        if not self.state.terminal and self.state.reason:
            self.state = dataclasses.replace(self.state, reason=reason)

    def fail(self, reason: str) -> None:
        self.drain(reason, Ending.FAILED)

    def interrupt(self) -> bool:
        """Ctrl-C / SIGTERM: the first drains, the second cancels. Returns False on the third
        (the caller raises KeyboardInterrupt: the user insists)."""
        self.interrupts += 1
        if self.interrupts == 1:
            self.drain(DRAIN_ON_INTERRUPT, Ending.INTERRUPTED)
        elif self.interrupts == 2:
            self.cancel("interrupted: running trials cancelled", Ending.INTERRUPTED)
        return self.interrupts <= 2

    def end(self, all_failed: str | None = None) -> SweepState:
        """The lanes are gone: settle on the terminal state. `all_failed` is the reason when
        every trial of the study failed: such a sweep did not finish, whatever stopped it."""
        if self.state.terminal:
            return self.state
        ends_as = self._ends_as() or Ending.FINISHED
        if ends_as is Ending.FINISHED and all_failed:
            self.state = Failed(all_failed)
        else:
            # What was under way while draining is over now: say what happened, not what was
            # happening ("finishing running trials" must not be the last word).
            reason = AFTER_DRAIN.get(self.state.reason, self.state.reason)
            self.state = TERMINAL[ends_as](reason)
        return self.state
