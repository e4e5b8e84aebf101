"""How a code agent's effects reach the log: one ordered appender per run.

A run taken up again after the drive that began it is gone (its worker died) runs its
handler again from the start against its own record (`journal`): the effects the record
already holds are matched in order and not appended again (model answers and tool results
are the recorded ones), and the first effect past the record is appended as usual. An
effect that differs from the record (the handler does not repeat itself) is `Diverged`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any

from agency.contracts.events import (
    AgentError,
    AgentStarted,
    AgentStateSet,
    AnyEvent,
    ModelCompleted,
    ModelDelta,
    ReplyDelta,
    ToolError,
    ToolOutput,
    ToolStarted,
)
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.records import RecordedEvent
from agency.services.runtime.model_call import Append

_CONFLICT_ATTEMPTS = 100
_STREAMED = (ModelDelta, ReplyDelta)


class Diverged(Exception):
    """The handler, run again, did not repeat what its record holds."""

    def __init__(self, recorded: AnyEvent, produced: AnyEvent) -> None:
        super().__init__(
            f"the handler run again after its worker stopped did not repeat its record: "
            f"recorded {type(recorded).__name__}, now {type(produced).__name__}"
        )


def journal_of(events: Sequence[RecordedEvent], run_id: str) -> tuple[deque[AnyEvent], Any]:
    """What the run's handler produced before (after its `agent.started`; streamed text
    and outside writers' events left out), and the agent's state when it began."""
    journal: deque[AnyEvent] = deque()
    state: Any = None
    begun = False
    for event in events:
        env = event.envelope
        payload = env.payload
        if not begun:
            if isinstance(payload, AgentStateSet):
                state = payload.value
            begun = isinstance(payload, AgentStarted) and payload.run_id == run_id
            continue
        outside = env.idempotency_key is not None or env.causation_id is not None
        mine = getattr(payload, "run_id", None) == run_id
        if mine and not outside and not isinstance(payload, _STREAMED):
            journal.append(payload)
    return journal, state


class Emitter:
    """Appends one code run's events in order; reply events wait in `pending` for the next
    append (or the periodic flush)."""

    def __init__(
        self,
        append: Append,
        state: ThreadState,
        run_id: str,
        *,
        journal: deque[AnyEvent] | None = None,
        agent_state: Any = None,
    ) -> None:
        self._append = append
        self.state = state
        self.run_id = run_id
        self.pending: list[AnyEvent] = []
        self.aborted = asyncio.Event()
        self._lock = asyncio.Lock()
        self.journal: deque[AnyEvent] = journal if journal is not None else deque()
        # The agent's state as the handler sees it (a resumed handler: as it was then).
        self.agent_state = agent_state

    def queue(self, event: AnyEvent) -> None:
        last = self.pending[-1] if self.pending else None
        if isinstance(event, ReplyDelta) and isinstance(last, ReplyDelta):
            self.pending[-1] = ReplyDelta(run_id=self.run_id, text=last.text + event.text)
        else:
            self.pending.append(event)

    def _past_record(self, batch: Sequence[AnyEvent]) -> list[AnyEvent]:
        """What of `batch` the record does not hold yet."""
        kept: list[AnyEvent] = []
        for event in batch:
            if not self.journal:
                kept.append(event)
            elif not isinstance(event, _STREAMED):
                recorded = self.journal.popleft()
                if recorded != event:
                    raise Diverged(recorded, event)
        return kept

    def recorded_answer(self, step: int) -> ModelCompleted | AgentError | None:
        """The recorded outcome of model call `step`, if the record has it."""
        head = self.journal[0] if self.journal else None
        if (isinstance(head, ModelCompleted) and head.step == step) or isinstance(head, AgentError):
            self.journal.popleft()
            return head
        return None

    def recorded_tool(self, call_id: str) -> ToolOutput | ToolError | None:
        """The recorded outcome of a state tool call, if the record has it (its events are
        passed over: the record holds them)."""
        head = self.journal[0] if self.journal else None
        if not (isinstance(head, ToolStarted) and head.tool_call_id == call_id):
            return None
        while self.journal:
            event = self.journal.popleft()
            if isinstance(event, ToolOutput | ToolError) and event.tool_call_id == call_id:
                return event
        return None

    async def emit(self, events: Sequence[AnyEvent] = ()) -> ThreadState:
        """Append what is pending and `events`. Raises `CancelledError` (after setting
        `aborted`) when the run stopped running meanwhile."""
        async with self._lock:
            if self.aborted.is_set():
                raise asyncio.CancelledError
            batch = self._past_record([*self.pending, *events])
            self.pending = []
            if not batch:
                return self.state
            for _ in range(_CONFLICT_ATTEMPTS):
                state, appended = await self._append(self.state, batch)
                self.state = state
                if appended:
                    return state
                run = state.run(self.run_id)
                if run is None or run.status != "running":
                    self.aborted.set()
                    raise asyncio.CancelledError
            raise RuntimeError(f"run {self.run_id}: could not append after repeated conflicts")
