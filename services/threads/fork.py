"""Forking a thread: a new thread whose history is the original's up to one event.

The copy is new events on a new thread, each pointing back at its original
(`causation_id`), behind a `thread.created` of its own (same agency and agent type, a new
id, no parent: a fork reports to nobody). A fork taken inside a run ends with that run
canceled ("forked mid-run") and every open call answered, so the new thread is idle and can
be invoked. With `agent_type` the copy ends with a `thread.blueprint_switched`.

Children fork with their parent: every thread of the subtree created before the cut is
forked at its last event before the cut (the cut is a stream sequence, one moment for the
whole tree); forked children name the forked parent (and are written before it), and every
mention of a forked thread in the copies (subagent events, texts the model saw, idempotency
keys) names its fork.

The services react to the copied events as to any others, so the copy is made to leave
them nothing to do: a requested tool call unanswered at the cut gets a `tool.error` (the
tools service runs only unanswered calls), a running child's call gets a canceled
`subagent.completed`, children of the subagents coordinator keep the id it would derive for
the forked parent (so a copied request finds its child and its first run already there),
and each thread is appended in atomic batches of at most 1,000 events split where the
thread was quiet, so nobody sees a half-copied run.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

import msgspec

from agency.contracts.envelope import Envelope
from agency.contracts.events import (
    ThreadCreated,
)
from agency.contracts.http import ForkOut
from agency.contracts.ids import derived_id, new_id
from agency.domain.child_naming import child_thread_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.records import AppendResult, EventContext, Position
from agency.services.threads.fork_copies import Copy, chunk_copies, plan_copies
from agency.services.threads.reads import Creation, read_thread, thread_creations
from agency.services.threads.tree import descendants


class ForkError(Exception):
    """A fork that cannot be made as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class ForkResult:
    thread_id: str
    source_thread_id: str
    at_seq: int
    # Original child thread id → its fork, for every descendant forked along.
    children: dict[str, str]
    # Runs the fork ended (mid-run at the cut), by forked thread id.
    canceled_runs: dict[str, tuple[str, ...]]

    def answer(self) -> ForkOut:
        """As `POST …/fork` answers it and `agency fork --json` prints it."""
        return ForkOut(
            thread_id=self.thread_id,
            forked_from=self.source_thread_id,
            at_seq=self.at_seq,
            children=self.children,
            canceled_runs=[run for runs in self.canceled_runs.values() for run in runs],
        )


class _CopyStore(EventStore):
    """The event store with envelope fields per event: each copy names its original."""

    def __init__(self, bus: Bus) -> None:
        super().__init__(bus.nc, bus.js, stream=bus.store.stream, layout=bus.store.layout)
        self._copies: Sequence[Copy] = ()

    async def append_copies(
        self,
        tenant_id: str,
        thread_id: str,
        copies: Sequence[Copy],
        *,
        expected: Position,
        context: EventContext,
    ) -> AppendResult:
        # `append` builds its envelopes before its first await, and this store serves one
        # fork, so nothing can interleave between setting the copies and their use.
        self._copies = copies
        payloads = [c.payload for c in copies]
        return await self.append(
            tenant_id, "thread", thread_id, payloads, expected=expected, context=context
        )

    def _stamp(self, envelopes: list[Envelope]) -> list[Envelope]:
        # Only the envelope carries the copied key: the broker's message ids stay unset,
        # so the copy is never mistaken for a retry of the original's appends.
        return [
            msgspec.structs.replace(
                e, causation_id=c.causation_id, idempotency_key=c.idempotency_key
            )
            for e, c in zip(envelopes, self._copies, strict=True)
        ]


@dataclass(frozen=True, slots=True)
class _ThreadWrite:
    thread_id: str
    chunks: list[list[Copy]]
    context: EventContext


@dataclass(frozen=True, slots=True)
class ForkPlan:
    """What a fork will write, computed from the log alone: the same source, cut and fork
    id always give the same plan, so a fork interrupted halfway is finished, not redone."""

    result: ForkResult
    writes: tuple[_ThreadWrite, ...]

    def events_of(self, thread_id: str) -> int:
        """How many events the fork writes to one of its threads."""
        write = next(w for w in self.writes if w.thread_id == thread_id)
        return sum(len(c) for c in write.chunks)


class ForkOptions(TypedDict, total=False):
    """How a fork is made: the agent type its root runs instead (one of
    `known_agent_types`, when given), and the new root's id (`fork_id`: a repeat with it
    finishes what an interrupted fork left)."""

    agent_type: str | None
    known_agent_types: Collection[str] | None
    fork_id: str | None


async def fork_thread(
    bus: Bus, tenant_id: str, thread_id: str, at_seq: int, **options: Unpack[ForkOptions]
) -> ForkResult:
    """Fork `thread_id` (and its subtree) at its event `at_seq`; see the module docstring."""
    plan = await plan_fork(bus, tenant_id, thread_id, at_seq, **options)
    await write_fork(bus, tenant_id, plan)
    return plan.result


async def plan_fork(
    bus: Bus,
    tenant_id: str,
    thread_id: str,
    at_seq: int,
    *,
    agent_type: str | None = None,
    known_agent_types: Collection[str] | None = None,
    fork_id: str | None = None,
) -> ForkPlan:
    """The fork's plan, without writing anything; `ForkError` when it cannot be made."""
    source = await read_thread(bus.store, tenant_id, thread_id)
    if not 1 <= at_seq <= source[-1].seq:
        raise ForkError(
            f"atSeq {at_seq} is outside thread {thread_id}'s history (1..{source[-1].seq})"
        )
    known = known_agent_types
    if agent_type is not None and known is not None and agent_type not in known:
        raise ForkError(
            f"unknown agentType {agent_type!r}; the agency has "
            f"{', '.join(sorted(known)) or 'no blueprints'}"
        )
    cut_event = next(e for e in source if e.seq == at_seq)
    cut = cut_event.stream_seq
    partitioned = bus.layout.partitioned
    creations = await thread_creations(
        bus.nc,
        tenant_id,
        start_seq=source[0].stream_seq,
        until_seq=cut,
        layout=bus.layout,
        until_time=cut_event.envelope.ts,
    )
    # On a log of partitions, the creations are cut by time (their sequences are not one
    # stream's).
    subtree = descendants(creations, thread_id, created_until=None if partitioned else cut)
    ids = _fork_ids(
        tenant_id, thread_id, subtree, {c.thread_id: c for c in creations}, fork_id or new_id()
    )
    canceled_runs: dict[str, tuple[str, ...]] = {}
    writes: list[_ThreadWrite] = []
    # Children before their parent: the coordinator, reacting to the parent's copied
    # subagent requests, must find each forked child already complete.
    plans: list[tuple[str, str | None]] = [(thread_id, None)]
    plans.extend((child, parent) for child, parent, _ in subtree)
    for original, parent in reversed(plans):
        events = (
            source if original == thread_id else await bus.store.read(tenant_id, "thread", original)
        )
        prefix = [e for e in events if e.stream_seq <= cut]
        if not prefix or not isinstance(prefix[0].payload, ThreadCreated):
            raise ForkError(f"thread {original} does not start with thread.created")
        copies, closing, runs = plan_copies(
            tenant_id,
            prefix,
            ids,
            new_parent=ids[parent] if parent is not None else None,
            agent_type=agent_type if original == thread_id else None,
        )
        canceled_runs[ids[original]] = runs
        context = EventContext(
            agency_id=prefix[0].envelope.agency_id,
            thread_id=ids[original],
            correlation_id=ids[thread_id],
        )
        writes.append(
            _ThreadWrite(ids[original], chunk_copies(tenant_id, prefix, copies, closing), context)
        )
    result = ForkResult(
        thread_id=ids[thread_id],
        source_thread_id=thread_id,
        at_seq=at_seq,
        children={child: ids[child] for child, _, _ in subtree},
        canceled_runs={t: runs for t, runs in canceled_runs.items() if runs},
    )
    return ForkPlan(result=result, writes=tuple(writes))


async def write_fork(bus: Bus, tenant_id: str, plan: ForkPlan) -> None:
    """Write a plan; chunks a thread already holds (an interrupted fork's) are skipped."""
    store = _CopyStore(bus)
    for write in plan.writes:
        existing, position = await bus.store.read_positioned(tenant_id, "thread", write.thread_id)
        written = len(existing)
        for chunk in write.chunks:
            if written >= len(chunk):
                written -= len(chunk)
                continue
            if written:
                raise ForkError(
                    f"thread {write.thread_id} holds events that are not this fork's; "
                    "choose another fork id"
                )
            result = await store.append_copies(
                tenant_id, write.thread_id, chunk, expected=position, context=write.context
            )
            position = result.position


def _fork_ids(
    tenant_id: str,
    root: str,
    subtree: Sequence[tuple[str, str, int]],
    creations: dict[str, Creation],
    fork_id: str,
) -> dict[str, str]:
    """A new id per forked thread. A child the subagents coordinator spawned keeps the id it
    derives from (parent, call), computed for the forked parent: a copied request then finds
    its child (and the child its first run) already in place, and nothing is spawned twice."""
    ids = {root: fork_id}
    for child, parent, _ in subtree:
        created = creations[child].event.payload
        ref = created.parent if isinstance(created, ThreadCreated) else None
        call = ref.tool_call_id if ref is not None else None
        derived = call is not None and child == child_thread_id(tenant_id, parent, call)
        ids[child] = (
            child_thread_id(tenant_id, ids[parent], call)
            if derived and call
            else derived_id("th", "fork", fork_id, child)
        )
    return ids
