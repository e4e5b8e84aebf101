"""Re-execution: the current runtime code over a recorded thread (or tree), in memory.

The recorded outside inputs are copied into a `MemoryEventStore` in their recorded order;
after each, the thread is driven by a real `ThreadDriver` built on that store, the current
`AgentSystem` and a `RecordedProvider`. An input the live runtime saw arrive mid-work (a
cancel during a model call, a request queued during a run) lands at the same point: just
before the runtime's next append once it has produced as many events as the record had
before that input, so the driver loses the same race and decides again. The events the
driver produced are then compared with the recorded ones. Nothing is written to the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import structlog

from agency.contracts.events import ModelStarted
from agency.domain.comparison import Comparison, compare
from agency.infra.jetstream.records import Position, RecordedEvent
from agency.services.agents.system import AgentSystem
from agency.services.runtime.loop import ThreadDriver, UnknownThread
from agency.services.runtime.replay.mcp_tools import RecordedTools
from agency.services.runtime.replay.memstore import MemoryEventStore
from agency.services.runtime.replay.recorded import (
    STREAMED,
    InputGroup,
    RecordedProvider,
    ReplayStop,
    ThreadRecord,
    split_record,
)
from agency.services.threads.caches import BlueprintCache, ThreadCache

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Report:
    comparisons: tuple[Comparison, ...]

    @property
    def same(self) -> bool:
        return all(c.same for c in self.comparisons)

    @property
    def compared(self) -> int:
        return sum(c.compared for c in self.comparisons)


class _ThreadRun:
    """One thread's re-execution; the recorded provider's `Feed`."""

    def __init__(
        self, record: ThreadRecord, store: MemoryEventStore, system: AgentSystem, world: _World
    ) -> None:
        self.record = record
        self._store = store
        self._world = world
        self._next = 0
        self._seen = Position()
        self._produced = 0
        self._model_run = ""
        self.stopped: str | None = None
        self.failed: str | None = None
        self.driver = ThreadDriver(
            store,
            system,
            RecordedProvider(record, self),
            ThreadCache(store),
            BlueprintCache(store),
            end_runs_on_failure=False,
            mcp=RecordedTools(record.events, "mcp"),
            remote_agents=RecordedTools(record.events, "remote_agent"),
            # The recorded provider finds each call's run from its stored `model.started`.
            opening_hold=0.0,
        )

    @property
    def thread_id(self) -> str:
        return self.record.thread_id

    @property
    def next_group(self) -> InputGroup | None:
        if self.stopped or self.failed or self._next >= len(self.record.inputs):
            return None
        return self.record.inputs[self._next]

    def _sync(self) -> None:
        """Count what the driver produced since last time."""
        newer = self._store.since(self.record.tenant_id, "thread", self.thread_id, self._seen)
        for event in newer:
            if not self._store.is_copy(event) and event.type not in STREAMED:
                self._produced += 1
                if isinstance(event.payload, ModelStarted):
                    self._model_run = event.payload.run_id
        if newer:
            self._seen = newer[-1].position

    def model_run(self) -> str:
        self._sync()
        return self._model_run

    def inject(self) -> None:
        group = self.next_group
        if group is None:
            return
        self._next += 1
        # The driver acted on the group once all of it was in the log: the world it saw then
        # holds what came before the group's last event, such as a blueprint saved after the
        # thread was created but before its first run was accepted.
        self._world.before(group.last_stream_seq)
        self._store.copy([e.envelope for e in group.events])

    def inject_due(self) -> bool:
        self._sync()
        landed = False
        while (group := self.next_group) is not None and group.trigger <= self._produced:
            self.inject()
            landed = True
        return landed

    async def drive(self) -> None:
        try:
            await self.driver.drive(self.record.tenant_id, self.thread_id)
        except ReplayStop as e:
            self.stopped = str(e)
        except UnknownThread as e:
            self.failed = f"the record does not start with thread.created: {e}"
        except Exception as e:  # the code under test failing is a finding, not a crash
            log.debug("re-executed runtime raised", thread_id=self.thread_id, exc_info=True)
            self.failed = f"the runtime raised {type(e).__name__}: {e}"

    def produced(self) -> list[RecordedEvent]:
        return [
            e
            for e in self._store.events(self.record.tenant_id, "thread", self.thread_id)
            if not self._store.is_copy(e) and e.type not in STREAMED
        ]


class _World:
    """Everything outside the threads the driver reads: the agencies' blueprint events,
    copied in as the record reached them (those written before an input group's last event
    are in when the group lands)."""

    def __init__(self, store: MemoryEventStore, agency_events: Sequence[RecordedEvent]) -> None:
        self._store = store
        self._pending = sorted(agency_events, key=lambda e: e.stream_seq)
        self._next = 0

    def before(self, stream_seq: int) -> None:
        start = self._next
        while self._next < len(self._pending) and self._pending[self._next].stream_seq < stream_seq:
            self._next += 1
        if self._next > start:
            self._store.copy([e.envelope for e in self._pending[start : self._next]])


async def reexecute(
    histories: Sequence[Sequence[RecordedEvent]],
    system: AgentSystem,
    *,
    agency_events: Sequence[RecordedEvent] = (),
) -> Report:
    """Re-execute threads together (a parent and its children) and compare each."""
    store = MemoryEventStore()
    world = _World(store, agency_events)
    runs: dict[str, _ThreadRun] = {}
    for events in histories:
        if not events:
            continue
        env = events[0].envelope
        record = split_record(env.tenant_id, env.aggregate_id, events)
        runs[record.thread_id] = _ThreadRun(record, store, system, world)

    def before_append(tenant_id: str, aggregate: str, aggregate_id: str) -> None:
        run = runs.get(aggregate_id) if aggregate == "thread" else None
        if run is not None:
            run.inject_due()

    store.before_append = before_append
    while True:
        waiting = [r for r in runs.values() if r.next_group is not None]
        if not waiting:
            break
        # The thread whose next recorded input came first in the log goes next.
        run = min(waiting, key=lambda r: cast(InputGroup, r.next_group).first_stream_seq)
        run.inject()
        await run.drive()
    return Report(
        tuple(
            compare(run.thread_id, run.record.produced, run.produced(), run.stopped, run.failed)
            for run in runs.values()
        )
    )
