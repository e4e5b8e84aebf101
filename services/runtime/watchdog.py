"""The watchdog's judgement of one run: a pure function of the thread and the clock.

Every accepted request arms a `runtime.watch` command for its run, which the broker keeps
delivering (deferred) until the run has ended. Each delivery asks `verdict`:

- the run ended (or never will start): the watch is done;
- a worker holds the thread's lease: it is alive and working, look again later (the
  holder itself stops a drive that appends nothing for `end_after`, see `RuntimeService`);
- the thread changed recently: look again once `stall_after` has passed since;
- nothing changed for `stall_after` and nobody drives it: resume it (drive the thread,
  which does whatever the log says is next: a lost trigger is made good this way);
- a running (or startable) run without progress for `end_after`: end it as `stalled`.
- a run paused on a person's approval (HITL, a breakpoint) gives its watch up once it has
  been still for `stall_after`: only the person's command moves it, and the runtime arms a
  new watch when it takes that command. Ten thousand parked runs so hold no deferred
  command on the broker (each one costs the broker timer work for as long as it is pending).
- a run paused for its subagents (or out of steps) is resumed when it has waited long,
  but never ended: waiting is what it is meant to do. It is looked at less often the
  longer it waits (after as long again as it has waited, at most `paused_look_max`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime

from agency.domain.thread_state import ThreadState


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """`AGENCY_WATCHDOG_STALL`, `AGENCY_WATCHDOG_END` and `AGENCY_WATCHDOG_PAUSED_MAX`, in
    seconds."""

    stall_after: float = 60.0
    end_after: float = 900.0
    paused_look_max: float = 900.0

    @classmethod
    def from_env(cls) -> WatchSettings:
        return cls(
            stall_after=float(os.environ.get("AGENCY_WATCHDOG_STALL", "60")),
            end_after=float(os.environ.get("AGENCY_WATCHDOG_END", "900")),
            paused_look_max=float(os.environ.get("AGENCY_WATCHDOG_PAUSED_MAX", "900")),
        )


@dataclass(frozen=True, slots=True)
class Done:
    """The run has ended: nothing left to watch."""


@dataclass(frozen=True, slots=True)
class Parked:
    """The run waits for a person: their command arms the next watch."""


@dataclass(frozen=True, slots=True)
class Later:
    seconds: float


@dataclass(frozen=True, slots=True)
class Resume:
    """Drive the thread now, then look again in `seconds`."""

    seconds: float


@dataclass(frozen=True, slots=True)
class End:
    reason: str


Verdict = Done | Parked | Later | Resume | End


def verdict(
    state: ThreadState, run_id: str, now: datetime, leased: bool, settings: WatchSettings
) -> Verdict:
    run = state.run(run_id)
    if run is None or run.terminal:
        return Done()
    active = state.active_run
    if run.status == "registered" and active is not None and active.run_id != run_id:
        return Later(settings.stall_after)  # queued: the active run's own watch covers it
    if leased:
        return Later(settings.stall_after)
    since = state.last_event_at or state.created_at or now
    idle = (now - since).total_seconds()
    if idle < settings.stall_after:
        return Later(max(settings.stall_after - idle, 0.05))
    if run.at_breakpoint or (run.status == "paused" and run.reason == "hitl" and run.hitl_pending):
        return Parked()
    if run.status == "paused":
        longest = max(settings.paused_look_max, settings.stall_after)
        return Resume(min(max(idle, settings.stall_after), longest))
    if idle < settings.end_after:
        return Resume(min(settings.stall_after, max(settings.end_after - idle, 0.05)))
    waiting = "its tool results" if state.open_tool_calls() else "its next step"
    return End(
        f"the run made no progress for {idle:.0f} s with no worker driving it "
        f"(waiting for {waiting}); the watchdog ended it"
    )
