"""A run's status read from its thread's log, and a bounded wait for it to change.

The log is the truth and is readable the moment the runtime appends, so an invoke can answer
the run's status without waiting for a read model.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from agency.contracts.events import RequestInjected, RequestRejected
from agency.contracts.http import RunStatus
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position, RecordedEvent
from agency.services.api.logwait import watch_log
from agency.services.client.calls import RUN_STATUS_OF

T = TypeVar("T")

# Threads whose run statuses the API keeps folded (see `KeptStatuses`).
STATUSES_KEPT = 1_000
TERMINAL: frozenset[str] = frozenset({"completed", "canceled", "error", "rejected"})

# A run delayed (`run.delayed`) is queued until it is asked for.
_STATUS_OF: dict[str, RunStatus] = {
    "request.accepted": "queued",
    "run.delayed": "queued",
    **RUN_STATUS_OF,
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a run was refused (`request.rejected`), and the command whose decision it was."""

    reason: str
    command_id: str | None


class RunStatuses:
    """Every run's status in one thread, folded from its events."""

    def __init__(self) -> None:
        self.of: dict[str, RunStatus] = {}
        # A request injected into the active run follows that run from then on.
        self.joined: dict[str, str] = {}
        # Why each refused run was refused.
        self.refusals: dict[str, Refusal] = {}

    def fold(self, events: Iterable[RecordedEvent]) -> None:
        for event in events:
            if isinstance(event.payload, RequestRejected):
                refusal = Refusal(event.payload.reason, event.envelope.causation_id)
                self.refusals.setdefault(event.payload.run_id, refusal)
            if isinstance(event.payload, RequestInjected):
                host, request = event.payload.run_id, event.payload.request_run_id
                self.joined[request] = host
                self.of[request] = self.of.get(host, "running")
                continue
            changed = _STATUS_OF.get(event.type)
            run_id = getattr(event.payload, "run_id", None)
            if changed is None or not isinstance(run_id, str):
                continue
            status = self.of.get(run_id)
            if status in TERMINAL:
                continue
            if changed == "queued" and status is not None:
                continue  # a repeat's acceptance does not move a started run back
            self.of[run_id] = changed
            for request, host in self.joined.items():
                if host == run_id:
                    self.of[request] = changed

    def copy(self) -> RunStatuses:
        copied = RunStatuses()
        copied.of, copied.joined = dict(self.of), dict(self.joined)
        copied.refusals = dict(self.refusals)
        return copied

    def waits_behind(self, run_id: str) -> bool:
        """Another run of the thread is active (running or paused), so `run_id` queues."""
        return any(
            other != run_id and status in ("running", "paused") for other, status in self.of.items()
        )


@dataclass(frozen=True, slots=True)
class Seen:
    """A thread's run statuses as folded from its log up to `position`."""

    runs: RunStatuses
    position: Position


class Feed(Protocol):
    """A thread's events followed as the log stores them (`streaming.ThreadFeed`)."""

    @property
    def position(self) -> Position | None: ...

    async def catch_up(self) -> None: ...

    async def until(
        self, found: Callable[[list[RecordedEvent]], T | None], timeout: float
    ) -> T | None: ...


class KeptStatuses:
    """The run statuses each thread's last wait folded, and where it stopped reading: the
    next invoke of the thread reads on from there, not from the start of a long log. The
    least recently used threads go first."""

    def __init__(self, capacity: int = STATUSES_KEPT) -> None:
        self._capacity = capacity
        self._kept: OrderedDict[tuple[str, str], Seen] = OrderedDict()

    def seen(self, tenant: str, thread_id: str) -> Seen | None:
        return self._kept.get((tenant, thread_id))

    def keep(self, tenant: str, thread_id: str, seen: Seen) -> None:
        key = (tenant, thread_id)
        self._kept[key] = seen
        self._kept.move_to_end(key)
        while len(self._kept) > self._capacity:
            self._kept.popitem(last=False)


class StatusDeps(Protocol):
    """What a wait for a run's status uses of the API's dependencies (`deps.ApiDeps`)."""

    @property
    def bus(self) -> Bus: ...

    @property
    def run_statuses(self) -> KeptStatuses: ...


async def wait_for_status(
    deps: StatusDeps,
    tenant: str,
    thread_id: str,
    run_id: str,
    timeout: float,
    done: Callable[[RunStatus | None, RunStatuses], bool],
    send: Callable[[], Awaitable[object]] | None = None,
    seen: Seen | None = None,
    feed: Feed | None = None,
) -> tuple[RunStatus, Refusal | None, Seen | None]:
    """The run's status once `done` holds, or as it is when `timeout` runs out, and why it
    was refused if it was (`request.rejected`); woken by
    the thread's events as they are stored. `send` (the command the run's events answer)
    is sent once the thread is watched: see `watch_log`. `seen`: the statuses already
    folded from the log up to a position, which the wait reads on from (by default, where
    the thread's last wait stopped; else from the start). `feed`: the thread's events
    followed from `seen` on (a caller that follows the run on after its status): each is
    read as the log stores it, where a watch's wake-up may come before the store has it.
    Also answers the thread's statuses as this wait left them (None if it read nothing)."""
    seen = seen or deps.run_statuses.seen(tenant, thread_id)
    runs = seen.runs.copy() if seen is not None else RunStatuses()

    def reached(events: list[RecordedEvent]) -> tuple[RunStatus | None] | None:
        runs.fold(events)
        status = runs.of.get(run_id)
        return (status,) if done(status, runs) else None

    answer, position = await sent_and_seen(
        deps, tenant, thread_id, reached, timeout,
        send=send, feed=feed, position=seen.position if seen is not None else None,
    )  # fmt: skip
    left = Seen(runs, position) if position is not None else None
    if left is not None:
        deps.run_statuses.keep(tenant, thread_id, left)
    status = answer[0] if answer is not None else runs.of.get(run_id)
    return status or "pending", runs.refusals.get(run_id), left


async def sent_and_seen(
    deps: StatusDeps,
    tenant: str,
    thread_id: str,
    found: Callable[[list[RecordedEvent]], T | None],
    timeout: float,
    *,
    send: Callable[[], Awaitable[object]] | None = None,
    feed: Feed | None = None,
    position: Position | None = None,
) -> tuple[T | None, Position | None]:
    """Send (`send`) once the thread is followed, then read its events until `found`
    answers something other than None (None after `timeout`), and where the reading
    stopped. On `feed` when the caller follows the thread on (each event handed over as
    the log stores it, and kept for the caller); otherwise on a watch (`watch_log`) that
    reads on from `position` (None: from the thread's start)."""
    if feed is not None:
        await feed.catch_up()
        if send is not None:
            await send()
        return await feed.until(found, timeout), feed.position
    async with watch_log(deps.bus.nc, deps.bus.store, tenant, "thread", thread_id) as log:
        log.position = position
        if send is not None:
            await send()
        return await log.until(found, timeout), log.position


def taken_up(run_id: str) -> Callable[[RunStatus | None, RunStatuses], bool]:
    """Started, refused, or accepted behind another active run."""

    def check(status: RunStatus | None, runs: RunStatuses) -> bool:
        if status == "queued":
            return runs.waits_behind(run_id)
        return status is not None

    return check


def on_the_log(status: RunStatus | None, runs: RunStatuses) -> bool:
    """The run is on the thread's log, whatever its status."""
    return status is not None


def finished(status: RunStatus | None, runs: RunStatuses) -> bool:
    """The run ended or waits for a person."""
    return status in TERMINAL or status == "paused"
