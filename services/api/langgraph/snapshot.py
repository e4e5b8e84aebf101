"""A thread as LangGraph reads it: the thread (`thread_out`) and its state at a checkpoint
(`state_out`), from the folded view."""

from __future__ import annotations

from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.langgraph.wire import Checkpoint, Thread, ThreadState, ThreadTask


def thread_out(view: GraphView) -> Thread:
    pending = view.interrupts()
    assert view.created_at is not None and view.updated_at is not None
    return Thread(
        thread_id=view.thread_id,
        created_at=view.created_at,
        updated_at=view.updated_at,
        metadata=view.metadata(),
        status=view.status(),
        values=view.values(),
        interrupts={i.id: [i] for i in pending},
    )


def state_out(view: GraphView) -> ThreadState:
    pending = view.interrupts()
    node = view.next_node()
    # A breakpoint before a model call, or a node next after an update, holds no interrupt:
    # its task names the node only.
    tasks = [ThreadTask(id=i.id, name="tools", interrupts=[i]) for i in pending]
    if node is not None and not pending:
        tasks = [ThreadTask(id=f"{node}-{view.last_seq}", name=node, interrupts=[])]
    checkpoint = Checkpoint(thread_id=view.thread_id, checkpoint_id=str(view.checkpoint_seq))
    parent = (
        Checkpoint(thread_id=view.thread_id, checkpoint_id=str(view.parent_seq))
        if view.parent_seq and view.parent_seq >= view.pruned_before
        else None
    )
    return ThreadState(
        values=view.values(),
        next=[node] if node else [],
        checkpoint=checkpoint,
        metadata={**view.metadata(), "step": view.checkpoint_seq},
        created_at=view.updated_at,
        parent_checkpoint=parent,
        tasks=tasks,
        interrupts=pending,
    )
