"""Bounded subagent trees on the log: admissions, stops and the sweep that follows a stop.

The decisions are in `domain/tree_bounds.py`; here they are applied to a tree's aggregate
(`tree.<root thread id>`) with optimistic concurrency, so every runtime and subagents
process agrees on each tree's threads however many spawn at once.

The operator's maxima (documented in docs/operations.md, "Limits"; a blueprint's `limits`
only lowers them), each a positive integer:

- `AGENCY_TREE_MAX_DEPTH`: levels of subagents below a root (default 5).
- `AGENCY_TREE_MAX_CHILDREN`: subagents one thread may start (default 10).
- `AGENCY_TREE_MAX_THREADS`: threads in one tree, the root counted (default 50).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from agency.contracts.commands import CancelRun, TerminateThread
from agency.contracts.events import AnyEvent, RequestAccepted, StopMode, ThreadCreated
from agency.contracts.limits import positive_ints
from agency.domain import tree_bounds
from agency.domain.tree_bounds import TreeBounds, TreeView
from agency.infra.jetstream.commandbus import CommandBus
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.services.decide import applied, decide_and_append

log = structlog.get_logger(__name__)

# The reason a sweep gives the runs and threads it ends; a child's report carrying it is
# not queued to its parent, which was stopped with it.
TREE_CANCELED = "tree canceled"
TREE_TERMINATED = "tree terminated"
# The reason a canceled run's children are canceled with (the subagents coordinator).
PARENT_CANCELED = "parent canceled"
# Commands sent by a stop or a cascade: their threads' subtrees are stopped by that already.
FROM_A_STOP = frozenset({TREE_CANCELED, TREE_TERMINATED, PARENT_CANCELED})


def bounds_from_env(environ: Mapping[str, str] | None = None) -> TreeBounds:
    """`AGENCY_TREE_MAX_DEPTH`, `_MAX_CHILDREN`, `_MAX_THREADS`, each a positive number."""
    return positive_ints(TreeBounds, "AGENCY_TREE_", environ)


def stopped_by_sweep(report: str) -> bool:
    """Whether a child's outcome comes from a stop of its tree."""
    return TREE_CANCELED in report or TREE_TERMINATED in report


class AgentTrees:
    def __init__(self, store: AggregateStore, bounds: TreeBounds | None = None) -> None:
        self._store = store
        self.bounds = bounds or bounds_from_env()

    async def view(self, tenant: str, root: str) -> TreeView:
        history = await self._store.read(tenant, "tree", root)
        return tree_bounds.fold(root, [e.payload for e in history])

    async def admit(
        self,
        tenant: str,
        root: str,
        *,
        parent: str,
        child: str,
        run_id: str,
        tool_call_id: str,
        bounds: TreeBounds,
        context: EventContext,
    ) -> str | None:
        """Admit `child` into the tree of `root` (once, whoever asks again); the refusal
        saying which limit and its value, or None."""
        refusal: list[str] = []

        def decide(history: list[RecordedEvent]) -> Sequence[AnyEvent]:
            refusal.clear()
            view = tree_bounds.fold(root, [e.payload for e in history])
            events, why = tree_bounds.admit(
                view,
                parent=parent,
                child=child,
                run_id=run_id,
                tool_call_id=tool_call_id,
                bounds=bounds,
            )
            if why is not None:
                refusal.append(why)
            return events

        await decide_and_append(
            self._store, tenant, "tree", root, decide,
            context=context, idempotency_key=f"admit:{child}",
        )  # fmt: skip
        return refusal[0] if refusal else None

    async def stop(
        self,
        tenant: str,
        root: str,
        thread_id: str,
        mode: StopMode,
        reason: str,
        *,
        key: str,
        context: EventContext,
    ) -> TreeView:
        """Record the stop of `thread_id`'s part of the tree (once per `key`) and answer the
        tree as it is after it: every thread admitted before the stop is in it."""

        def decide(history: list[RecordedEvent]) -> Sequence[AnyEvent]:
            if applied(history, key):
                return ()
            view = tree_bounds.fold(root, [e.payload for e in history])
            if thread_id != root and thread_id not in view.admitted:
                return ()
            return tree_bounds.stop(view, thread_id, mode, reason)

        await decide_and_append(
            self._store, tenant, "tree", root, decide, context=context, idempotency_key=key
        )
        # From the stream's leader: a replica behind it could miss a thread admitted just
        # before the stop, which the sweep would then leave running.
        history, _ = await self._store.read_positioned(tenant, "tree", root, from_leader=True)
        return tree_bounds.fold(root, [e.payload for e in history])

    async def sweep(
        self,
        commands: CommandBus,
        tenant: str,
        agency: str,
        view: TreeView,
        thread_id: str,
        mode: StopMode,
        *,
        key: str,
    ) -> int:
        """End every thread below `thread_id` that exists now: terminated, or (`cancel`) its
        active run canceled, a child whose first run has not begun terminated (its spawning
        run is canceled). One created later is ended on creation (`on_created`). Answers
        how many commands were sent."""
        sent = 0
        for child in view.below(thread_id):
            history = await self._store.read(tenant, "thread", child)
            if not history or not isinstance(history[0].payload, ThreadCreated):
                continue
            started = any(isinstance(e.payload, RequestAccepted) for e in history)
            if mode == "terminate" or not started:
                reason = TREE_TERMINATED if mode == "terminate" else TREE_CANCELED
                await commands.send(
                    tenant,
                    TerminateThread(agency_id=agency, thread_id=child, reason=reason),
                    idempotency_key=f"tree-stop:{key}:{child}",
                )
            else:
                await commands.send(
                    tenant,
                    CancelRun(agency_id=agency, thread_id=child, reason=TREE_CANCELED),
                    idempotency_key=f"tree-stop:{key}:{child}",
                )
            sent += 1
        if sent:
            log.info("tree stopped", root=view.root, thread_id=thread_id, mode=mode, ended=sent)
        return sent

    async def on_created(
        self, commands: CommandBus, tenant: str, agency: str, root: str, child: str
    ) -> bool:
        """A child thread was just created: terminate it when a stop of its tree came after
        its admission (its spawn was under way then). True: it was terminated."""
        view = await self.view(tenant, root)
        stopped = view.stopped_child(child)
        if stopped is None:
            return False
        reason = TREE_TERMINATED if stopped.mode == "terminate" else TREE_CANCELED
        await commands.send(
            tenant,
            TerminateThread(agency_id=agency, thread_id=child, reason=reason),
            idempotency_key=f"tree-created-stop:{child}",
        )
        return True
