"""A terminate or a cancel of a thread reaches its whole part of the subagent tree.

After the thread's own decision, the stop is recorded on the tree's aggregate (a spawn
decided after it is refused there, `domain/tree_bounds.py`) and every thread admitted below
the thread before it is ended in the same command (`AgentTrees.sweep`): terminated, or
its run canceled. A child whose spawn was under way is ended as it is created, by the
subagents coordinator. Nothing is recorded for a thread with no subagents.
"""

from __future__ import annotations

from agency.contracts.commands import CancelRun, CommandEnvelope, TerminateThread
from agency.contracts.events import StopMode
from agency.contracts.records import EventContext
from agency.infra.jetstream.commandbus import CommandBus
from agency.services.threads.agent_trees import FROM_A_STOP, AgentTrees
from agency.services.threads.caches import ThreadCache


async def stop_tree(
    trees: AgentTrees,
    threads: ThreadCache,
    commands: CommandBus,
    envelope: CommandEnvelope,
    payload: CancelRun | TerminateThread,
) -> int:
    """Stop `payload`'s thread's part of its tree; how many threads below it were ended."""
    tenant, thread_id = envelope.tenant_id, payload.thread_id
    if payload.reason in FROM_A_STOP:
        return 0  # sent by a stop (or a cascade) of a thread above: it sweeps below too
    state = await threads.load(tenant, thread_id)
    if not state.exists:
        return 0
    named = state.run(payload.run_id) if isinstance(payload, CancelRun) and payload.run_id else None
    if named is not None and not named.started:
        return 0  # a queued request withdrawn: nothing of the tree is its
    root = state.correlation_id or thread_id
    view = await trees.view(tenant, root)
    if not view.below(thread_id):
        return 0  # no subagents: nothing to stop
    mode: StopMode = "terminate" if isinstance(payload, TerminateThread) else "cancel"
    key = f"stop:{envelope.idempotency_key}"
    context = EventContext(
        agency_id=state.agency_id,
        thread_id=root,
        correlation_id=root,
        causation_id=envelope.command_id,
    )
    after = await trees.stop(
        tenant, root, thread_id, mode, payload.reason, key=key, context=context
    )
    return await trees.sweep(
        commands, tenant, payload.agency_id, after, thread_id, mode, key=envelope.idempotency_key
    )
