"""The workflows controller: mentions become runs of the members' threads, answers become
channel messages.

It reacts, on one durable consumer shared by every copy of the service, to:
- a workflow's `channel.message_posted`, `workflow.started`, `member.answered`: every idle
  member with unread mentions gets a run (`member.invoked`, then a `runtime.invoke` of its
  thread with a prompt built from its inbox);
- `workflow.stopped`: the runs of its members still going are canceled;
- the run terminals of member threads: the answer is posted to the channel
  (`member.answered` + `channel.message_posted`), a failure is retried with backoff
  (a `workflows.retry` command the broker holds until it is due);
- `schedule.fired`: the schedule's message is posted (or, for a schedule whose ticks run
  on threads of their own, a new thread's run is asked for: `own_thread.py`).

Events are handled in lanes (`lane`): one per workflow, its run terminals in its lane once
the member thread is known, and one per tenant for its schedule fires; a lane's handlers
run one at a time, so a hot workflow is worked on by one handler, not raced by sixteen. A
pump that read a workflow up to some sequence covers every trigger at or before it: a
trigger the last pump already read is passed over without reading the workflow again, so a
backlog of one hot workflow drains at the speed of its reads, not its appends.

Every step is a decision appended with an expected sequence and an idempotency key, and
every command it sends has a key derived from what it acts on: a redelivered event, or a
controller killed between an append and a send, repeats nothing and loses nothing (the
invokes of runs under way are sent again on every pass, and the runtime keeps one run per
key).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import timedelta

import structlog

from agency.contracts.commands import CancelRun, InvokeThread, RetryMember
from agency.contracts.envelope import utc_now
from agency.contracts.events import (
    AnyEvent,
    ChannelMessagePosted,
    ChatMessage,
    MemberAnswered,
    MemberSkipped,
    RunCanceled,
    RunCompleted,
    RunError,
    RunOptions,
    ScheduleFired,
    ScheduleSet,
    ThreadCreated,
    WorkflowStarted,
    WorkflowStopped,
)
from agency.contracts.events.workflow import MemberOutcome
from agency.contracts.ids import derived_id, new_id
from agency.contracts.sealed import PayloadErased
from agency.domain import workflow_decisions as decisions
from agency.domain.workflow_state import WorkflowState, fold
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent
from agency.services.decide import decide_and_append
from agency.services.workflows.engine.own_thread import run_on_own_thread

log = structlog.get_logger(__name__)

# Workflows whose last pumped sequence, and schedules whose settings, are remembered (the
# least recently used forgotten).
_REMEMBERED = 10_000


_PUMP_TRIGGERS = (ChannelMessagePosted, WorkflowStarted, MemberAnswered, MemberSkipped)


@dataclass(frozen=True, slots=True)
class _ScheduleSets:
    position: Position
    sets: tuple[tuple[int, ScheduleSet], ...]


@dataclass(frozen=True, slots=True)
class MemberLink:
    workflow_id: str
    member: str


class WorkflowController:
    def __init__(self, bus: Bus, store: AggregateStore | None = None) -> None:
        self._bus = bus
        # The workflows' decisions read through it (`histories.py`); the rest, the bus's.
        self._store = store or bus.store
        self._links: dict[tuple[str, str], MemberLink | None] = {}
        # (tenant, workflow) -> the workflow's sequence the last pump read.
        self._pumped: OrderedDict[tuple[str, str], int] = OrderedDict()
        # (tenant, workflow) -> the last trigger of it dead-lettered here.
        self._owed: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._schedules: OrderedDict[tuple[str, str], _ScheduleSets] = OrderedDict()

    def lane(self, event: RecordedEvent) -> Hashable | None:
        """The lane of an event: its workflow's, or the tenant's schedules'; None for what
        is not a workflow's (other threads' run terminals, passed over at once)."""
        env = event.envelope
        match env.aggregate:
            case "workflow":
                return ("workflow", env.tenant_id, env.aggregate_id)
            case "schedule":
                return ("schedules", env.tenant_id)
            case "thread" if decisions.is_member_thread(env.aggregate_id):
                link = self._links.get((env.tenant_id, env.aggregate_id))
                if link is not None:
                    return ("workflow", env.tenant_id, link.workflow_id)
                return ("thread", env.tenant_id, env.aggregate_id)
        return None

    async def handle(self, event: RecordedEvent) -> None:
        env = event.envelope
        match event.payload:
            case ChannelMessagePosted() | WorkflowStarted() | MemberAnswered() | MemberSkipped():
                if not self._pumped_past(env.tenant_id, env.aggregate_id, env.seq):
                    await self.pump(env.tenant_id, env.aggregate_id)
            case WorkflowStopped():
                await self._cancel_members(event)
                await self.pump(env.tenant_id, env.aggregate_id)
            case RunCompleted() | RunError() | RunCanceled():
                if env.aggregate == "thread" and decisions.is_member_thread(env.aggregate_id):
                    await self._answered(event)
            case ScheduleFired():
                await self._fired(event)

    # --- dispatch -----------------------------------------------------------------------

    async def read(self, tenant: str, workflow_id: str) -> WorkflowState:
        return fold(await self._store.read(tenant, "workflow", workflow_id), workflow_id)

    def _pumped_past(self, tenant: str, workflow_id: str, seq: int) -> bool:
        """Whether a pump of this process already read the workflow at or past `seq`, and
        past every trigger of it this process dead-lettered."""
        owed = self._owed.get((tenant, workflow_id), 0)
        return self._pumped.get((tenant, workflow_id), 0) >= max(seq, owed)

    async def dead_lettered(self, event: RecordedEvent, reason: str, detail: str) -> None:
        """Before a trigger is dead-lettered (its tenant's backlog over its bound): the next
        trigger of its workflow pumps even if a pump already read past its own sequence."""
        env = event.envelope
        if env.aggregate == "workflow" and isinstance(event.payload, _PUMP_TRIGGERS):
            key = (env.tenant_id, env.aggregate_id)
            self._owed[key] = max(env.seq, self._owed.get(key, 0))
            self._owed.move_to_end(key)
            while len(self._owed) > _REMEMBERED:
                self._owed.popitem(last=False)

    def _remember_pump(self, tenant: str, workflow_id: str, seq: int) -> None:
        key = (tenant, workflow_id)
        self._pumped[key] = max(seq, self._pumped.get(key, 0))
        self._pumped.move_to_end(key)
        while len(self._pumped) > _REMEMBERED:
            self._pumped.popitem(last=False)

    async def pump(self, tenant: str, workflow_id: str) -> WorkflowState:
        """Start the runs the inboxes call for, then (re)send the invoke of every run under
        way: the runtime keeps one run per key, so a repeat costs nothing."""
        read: list[RecordedEvent] = []

        def dispatch(history: list[RecordedEvent]) -> list[AnyEvent]:
            read[:] = history
            return decisions.dispatch(fold(history, workflow_id))

        result = await decide_and_append(
            self._store, tenant, "workflow", workflow_id, dispatch,
            context=EventContext(),
            # Marks the events of one pass as one decision (see `../cli/replay.py`).
            idempotency_key=f"dispatch:{new_id()}",
        )  # fmt: skip
        # The workflow as the decision left it: what it read and what it appended.
        state = fold([*read, *result.events], workflow_id)
        for invocation in state.active.values():
            if invocation.run_id in state.answered:
                continue
            member = state.members[invocation.member]
            run = invocation.run or RunOptions()
            try:
                await self._bus.commands.send(
                    tenant,
                    InvokeThread(
                        agency_id=state.agency_id,
                        thread_id=member.thread_id,
                        run_id=invocation.run_id,
                        messages=(ChatMessage(role="user", content=invocation.prompt),),
                        webhook=run.webhook,
                        pause_before_tools=run.pause_before_tools,
                        pause_before_model=run.pause_before_model,
                        pause_after_tools=run.pause_after_tools,
                    ),
                    idempotency_key=f"wf-invoke:{invocation.run_id}",
                )
            except PayloadErased:
                # The member's thread was deleted: its invocation is answered, not retried.
                await self._member_gone(tenant, workflow_id, invocation.run_id)
        self._remember_pump(tenant, workflow_id, state.last_seq)
        return state

    # --- answers ------------------------------------------------------------------------

    async def _member_gone(self, tenant: str, workflow_id: str, run_id: str) -> None:
        """A member's run cannot start, its thread deleted: it is answered `canceled`, said
        so on the channel, and the workflow goes on."""
        await decide_and_append(
            self._store, tenant, "workflow", workflow_id,
            lambda history: decisions.answer(
                fold(history, workflow_id), run_id=run_id, outcome="canceled",
                text=decisions.MEMBER_GONE, mention=False,
            ),
            context=EventContext(),
            idempotency_key=f"answer:{run_id}",
        )  # fmt: skip
        log.info("member thread deleted, its run not started", run_id=run_id)

    async def _link(self, tenant: str, thread_id: str) -> MemberLink | None:
        key = (tenant, thread_id)
        if key not in self._links:
            history = await self._bus.store.read(tenant, "thread", thread_id)
            created = next(
                (e.payload for e in history if isinstance(e.payload, ThreadCreated)), None
            )
            request = created.request if created else {}
            workflow_id, member = request.get("workflow_id"), request.get("member")
            self._links[key] = MemberLink(workflow_id, member) if workflow_id and member else None
        return self._links[key]

    async def _answered(self, event: RecordedEvent) -> None:
        env = event.envelope
        link = await self._link(env.tenant_id, env.aggregate_id)
        if link is None:
            return
        outcome: MemberOutcome
        match event.payload:
            case RunCompleted(run_id=run_id, result=text):
                outcome = "completed"
            case RunError(run_id=run_id, error=text):
                outcome = "error"
            case RunCanceled(run_id=run_id, reason=text):
                outcome = "canceled"
            case _:
                return
        tenant, workflow_id = env.tenant_id, link.workflow_id
        await decide_and_append(
            self._store, tenant, "workflow", workflow_id,
            lambda history: decisions.answer(
                fold(history, workflow_id), run_id=run_id, outcome=outcome, text=text
            ),
            context=EventContext(agency_id=env.agency_id),
            idempotency_key=f"answer:{run_id}",
        )  # fmt: skip
        state = await self.read(tenant, workflow_id)
        current = state.active.get(link.member)
        if current is not None and current.run_id == run_id and link.member in state.retrying:
            delay = decisions.retry_delay(current.attempt)
            await self._bus.commands.send(
                tenant,
                RetryMember(
                    agency_id=state.agency_id,
                    workflow_id=workflow_id,
                    member=link.member,
                    failed_run_id=run_id,
                    not_before=utc_now() + timedelta(seconds=delay),
                ),
                idempotency_key=f"wf-retry:{run_id}",
            )
            log.info("member run failed, retrying", member=link.member, delay=delay)

    async def retry(self, tenant: str, command: RetryMember) -> None:
        workflow_id = command.workflow_id
        await decide_and_append(
            self._store, tenant, "workflow", workflow_id,
            lambda history: decisions.retry(
                fold(history, workflow_id), command.member, command.failed_run_id
            ),
            context=EventContext(agency_id=command.agency_id),
            idempotency_key=f"retried:{command.failed_run_id}",
        )  # fmt: skip
        await self.pump(tenant, workflow_id)

    async def _cancel_members(self, event: RecordedEvent) -> None:
        env = event.envelope
        state = await self.read(env.tenant_id, env.aggregate_id)
        for invocation in state.active.values():
            if invocation.run_id in state.answered:
                continue
            await self._bus.commands.send(
                env.tenant_id,
                CancelRun(
                    agency_id=state.agency_id,
                    thread_id=state.members[invocation.member].thread_id,
                    reason="workflow stopped",
                ),
                idempotency_key=f"wf-cancel:{env.event_id}:{invocation.run_id}",
            )

    # --- schedules ----------------------------------------------------------------------

    async def _schedule_sets(self, tenant: str, schedule_id: str, upto: int) -> _ScheduleSets:
        """The schedule's `schedule.set` events, read at least up to sequence `upto`: only
        what was appended since the last look is read (a schedule's log grows by a fire a
        tick; its settings rarely change)."""
        key = (tenant, schedule_id)
        known = self._schedules.pop(key, None) or _ScheduleSets(Position(), ())
        if known.position.seq < upto:
            events, position = await self._bus.store.read_positioned(
                tenant, "schedule", schedule_id, after=known.position
            )
            added = tuple((e.seq, e.payload) for e in events if isinstance(e.payload, ScheduleSet))
            known = _ScheduleSets(position, known.sets + added)
        self._schedules[key] = known
        while len(self._schedules) > _REMEMBERED:
            self._schedules.popitem(last=False)
        return known

    async def _fired(self, event: RecordedEvent) -> None:
        env = event.envelope
        known = await self._schedule_sets(env.tenant_id, env.aggregate_id, env.seq)
        spec = next((s for seq, s in reversed(known.sets) if seq < env.seq), None)
        if spec is None or spec.workflow_id is None:
            return
        workflow_id = spec.workflow_id
        if spec.agent and spec.options.own_thread is not None:
            # A new thread of the agent's blueprint each tick (`own_thread.py`).
            member = (await self.read(env.tenant_id, workflow_id)).members.get(spec.agent)
            if member is not None:
                await run_on_own_thread(self._bus, event, spec, member)
            return
        to = (spec.agent,) if spec.agent else ()
        message_id = derived_id("msg_", "schedule", env.event_id)

        def decide(history: list[RecordedEvent]) -> list[AnyEvent]:
            state = fold(history, workflow_id)
            if state.status == "absent":
                return []
            return decisions.post(
                state,
                message_id=message_id,
                sender=f"schedule:{spec.name}",
                content=spec.message,
                to=[n for n in to if n in state.members],
                run=spec.options.run,
            )

        await decide_and_append(
            self._store, env.tenant_id, "workflow", workflow_id,
            decide,
            context=EventContext(agency_id=spec.agency_id),
            idempotency_key=f"fired:{env.event_id}",
        )  # fmt: skip
