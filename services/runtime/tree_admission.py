"""A step's spawns admitted into their tree before the step is stored.

`next_action` decides a spawn (`subagent.requested`) from the thread alone; whether the
tree has room for it is the tree's aggregate's to say (`services/threads/agent_trees.py`).
Each spawn is admitted there first (once per child: a step decided again finds its
admission); a refused one becomes the call's tool error, saying which limit and its value,
so the model reads why and goes on without it.
"""

from __future__ import annotations

from collections.abc import Sequence

from agency.contracts.events import (
    AnyEvent,
    BlueprintSpec,
    RunPaused,
    SubagentMessaged,
    SubagentRequested,
    ToolError,
    ToolOutput,
)
from agency.contracts.records import EventContext
from agency.domain.child_naming import child_thread_id
from agency.domain.thread_state import ThreadState
from agency.services.threads.agent_trees import AgentTrees


async def admit_spawns(
    trees: AgentTrees,
    state: ThreadState,
    blueprint: BlueprintSpec,
    events: Sequence[AnyEvent],
) -> Sequence[AnyEvent]:
    """`events` with every spawn the tree refuses turned into its call's tool error."""
    requests = [e for e in events if isinstance(e, SubagentRequested)]
    if not requests:
        return events
    root = state.correlation_id or state.thread_id
    bounds = trees.bounds.lowered(blueprint.limits)
    context = EventContext(agency_id=state.agency_id, thread_id=root, correlation_id=root)
    refused: dict[str, str] = {}
    for request in requests:
        why = await trees.admit(
            state.tenant_id,
            root,
            parent=state.thread_id,
            child=child_thread_id(state.tenant_id, state.thread_id, request.tool_call_id),
            run_id=request.run_id,
            tool_call_id=request.tool_call_id,
            bounds=bounds,
            context=context,
        )
        if why is not None:
            refused[request.tool_call_id] = why
    if not refused:
        return events
    names = {c.id: c.name for m in state.messages for c in m.tool_calls}
    kept: list[AnyEvent] = []
    for event in events:
        match event:
            case SubagentRequested(run_id=run_id, tool_call_id=call_id) if call_id in refused:
                kept.append(
                    ToolError(
                        run_id=run_id,
                        tool_call_id=call_id,
                        tool_name=names.get(call_id, "task"),
                        error=refused[call_id],
                    )
                )
            case ToolOutput(tool_call_id=call_id) if call_id in refused:
                continue  # a non-blocking call's "started" answer: it did not start
            case _:
                kept.append(event)
    waits = any(isinstance(e, SubagentRequested | SubagentMessaged) and e.blocking for e in kept)
    if not waits:
        kept = [e for e in kept if not (isinstance(e, RunPaused) and e.reason == "subagent")]
    return kept
