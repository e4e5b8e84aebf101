"""Where a run got to, read from its thread's log, and a bounded wait for it to get there.

A run's outcome is its status, the last thing its model said, and the tool calls it waits
on a person to approve. The log is the truth and is readable the moment the runtime
appends, so the outcome is read from it; it is answered once the read models have applied
it too (bounded by the same wait), so the thread's state read right after shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import msgspec

from agency.contracts.events import HitlInterrupt, MessageAppended, RunPaused
from agency.contracts.http import RunStatus
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.records import Position
from agency.projections import catalog
from agency.projections.state_queries import ToolCallView, parse_args
from agency.services.api.deps import ApiDeps
from agency.services.api.runstatus import TERMINAL, RunStatuses

# Told the run's status and step whenever either changes during a wait.
Progress = Callable[[RunStatus, int], Awaitable[None]]


class RunOutcome(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A run as a caller waiting on it sees it."""

    run_id: str
    # `pending` and `queued` (not started yet), `running`, `paused` (for a person or a
    # subagent), `completed`, `canceled`, `error`, `rejected`.
    status: RunStatus
    # The last assistant message of this run with text in it.
    last_message: str | None = None
    # The tool calls the run waits on a person to approve or reject (`approve`).
    pending_approval: list[ToolCallView] = []
    # Why it paused, failed or was canceled.
    reason: str | None = None
    error: str | None = None


class RunWatch:
    """One run's outcome, folded from its thread's events as they are read."""

    def __init__(self, tenant: str, thread_id: str, run_id: str) -> None:
        self.run_id = run_id
        self._thread = ThreadState(tenant_id=tenant, thread_id=thread_id)
        self._statuses = RunStatuses()
        self._last_message: str | None = None
        self.interrupted_at = 0  # stream sequence of the run's last approval request
        self.position: Position | None = None

    @property
    def thread_id(self) -> str:
        return self._thread.thread_id

    async def read(self, deps: ApiDeps) -> None:
        """Fold what the thread's log holds past what was read before."""
        events, self.position = await deps.bus.store.read_positioned(
            self._thread.tenant_id, "thread", self._thread.thread_id, after=self.position
        )
        for event in events:
            self._thread = self._thread.apply(event)
            match event.payload:
                case MessageAppended(run_id=run_id, message=message) if (
                    run_id == self.run_id and message.role == "assistant" and message.content
                ):
                    self._last_message = message.content
                case HitlInterrupt(run_id=run_id) if run_id == self.run_id:
                    self.interrupted_at = event.stream_seq
                case RunPaused(run_id=run_id, reason="breakpoint") if run_id == self.run_id:
                    self.interrupted_at = event.stream_seq
        self._statuses.fold(events)

    @property
    def step(self) -> int:
        run = self._thread.run(self.run_id)
        return run.step if run else 0

    @property
    def status(self) -> RunStatus:
        return self._statuses.of.get(self.run_id) or "pending"

    def waits_for_approval(self, since: int) -> bool:
        """The run waits on a person for calls it proposed, or at a breakpoint it reached,
        after stream sequence `since`."""
        run = self._thread.run(self.run_id)
        waits = run is not None and (bool(run.hitl_pending) or run.at_breakpoint)
        return waits and self.interrupted_at > since

    def outcome(self) -> RunOutcome:
        run = self._thread.run(self.run_id)
        pending = run.hitl_pending if run else ()
        return RunOutcome(
            run_id=self.run_id,
            status=self.status,
            last_message=self._last_message,
            pending_approval=[
                ToolCallView(id=c.id, name=c.name, args=parse_args(c.arguments)) for c in pending
            ],
            reason=run.reason if run else None,
            error=(run.error or None) if run else None,
        )


async def wait_for_outcome(
    deps: ApiDeps,
    tenant: str,
    thread_id: str,
    run_id: str,
    timeout: float,
    *,
    since: int = 0,
    stop: asyncio.Event | None = None,
    progress: Progress | None = None,
) -> RunOutcome:
    """The run's outcome once it has ended or waits for approval of calls proposed after
    stream sequence `since`; as it stands when `timeout` runs out or `stop` is set.
    `progress` hears of each change of the run's status or step on the way."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout, 0.0)
    watch = RunWatch(tenant, thread_id, run_id)
    stopping = stop or asyncio.Event()
    delay = 0.01
    seen: tuple[RunStatus, int] | None = None
    while True:
        await watch.read(deps)
        if watch.status in TERMINAL or watch.waits_for_approval(since):
            await _readable(deps, watch, deadline - loop.time())
            return watch.outcome()
        if progress is not None and seen != (watch.status, watch.step):
            seen = (watch.status, watch.step)
            await progress(watch.status, watch.step)
        remaining = deadline - loop.time()
        if remaining <= 0 or stopping.is_set():
            return watch.outcome()
        # Woken early when the server stops: the caller gets the status as it stands.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=min(delay, remaining))
        delay = min(delay * 2, 0.2)


async def _readable(deps: ApiDeps, watch: RunWatch, timeout: float) -> None:
    """Wait (within `timeout`) for every read model to have applied what the outcome was
    read from, so a read of the thread's state right after it (`get_state`) shows it too."""
    if watch.position is not None:
        partition = deps.bus.layout.partition(watch.thread_id)
        await deps.progress.wait_passed(
            catalog.NAMES, watch.position.stream_seq, timeout, partition=partition
        )


async def log_position(deps: ApiDeps, tenant: str, thread_id: str) -> int:
    """The stream sequence of the thread's last event (0 before its first)."""
    position = await deps.bus.store.last_position(tenant, "thread", thread_id)
    return position.stream_seq
