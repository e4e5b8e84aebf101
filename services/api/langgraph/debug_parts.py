"""LangGraph's `tasks`, `checkpoints` and `debug` stream modes, from the log.

A task is a node's work in one step: `model` from `model.started` to `model.completed`;
`tools`, one a tool call, from its `tool.started` (first attempt) to its result message.
A task's result is what it wrote (`{"messages": [...]}`), as LangGraph's task results are
its writes by channel; an approval asked before a call is its task's interrupt.

A checkpoint is the state after each event that `is_checkpoint` names: the same ids as
`threads.get_history` lists, with the state `threads.get_state` reads there. `debug` carries
both, wrapped as LangGraph's debug stream does: `{type: "task" | "task_result" |
"checkpoint", timestamp, step, payload}`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agency.contracts.events import (
    HitlInterrupt,
    MessageAppended,
    ModelCompleted,
    ModelStarted,
    ToolStarted,
)
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.langgraph.graphstate import GraphView, is_checkpoint
from agency.services.api.langgraph.messages import ai_message_id, message_dict
from agency.services.api.langgraph.snapshot import state_out

DEBUG_MODES = ("tasks", "checkpoints", "debug")


def _config(thread_id: str, checkpoint: dict[str, Any] | None) -> dict[str, Any] | None:
    if checkpoint is None:
        return None
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint.get("checkpoint_ns", ""),
            "checkpoint_id": checkpoint["checkpoint_id"],
        }
    }


def checkpoint_payload(view: GraphView) -> dict[str, Any]:
    """LangGraph's checkpoint payload for the view's state: what `get_state` reads there."""
    state = msgspec.to_builtins(state_out(view))
    tasks = [
        {"id": t["id"], "name": t["name"], "interrupts": t.get("interrupts", []), "state": None}
        for t in state.get("tasks", [])
    ]
    return {
        "config": _config(view.thread_id, state.get("checkpoint")),
        "parent_config": _config(view.thread_id, state.get("parent_checkpoint")),
        "values": state["values"],
        "metadata": state["metadata"],
        "next": state["next"],
        "tasks": tasks,
    }


def _task_id(node: str, run_id: str, key: str | int) -> str:
    return f"{node}:{run_id}:{key}"


def task_parts(event: RecordedEvent, view: GraphView) -> list[tuple[str, dict[str, Any]]]:
    """("task", start) or ("task_result", result) for the event, if it starts or ends one."""
    match event.payload:
        case ModelStarted(run_id=run_id, step=step):
            started = {"messages": view.messages}
            return [("task", _start(_task_id("model", run_id, step), "model", started))]
        case ModelCompleted(run_id=run_id, step=step, message=message):
            written = {"messages": [message_dict(message, ai_message_id(run_id, step))]}
            return [("task_result", _result(_task_id("model", run_id, step), "model", written))]
        case ToolStarted(run_id=run_id, tool_call_id=call_id, attempt=1) as started:
            call = {"name": started.tool_name, "id": call_id, "arguments": started.arguments}
            return [("task", _start(_task_id("tools", run_id, call_id), "tools", call))]
        case MessageAppended(run_id=run_id, message=message) if message.role == "tool":
            task = _task_id("tools", run_id or "", message.tool_call_id or "")
            return [("task_result", _result(task, "tools", {"messages": [view.messages[-1]]}))]
        case HitlInterrupt(run_id=run_id, proposed_tool_calls=calls):
            interrupts = msgspec.to_builtins(view.interrupts())
            return [
                ("task_result", _result(_task_id("tools", run_id, c.id), "tools", {}, interrupts))
                for c in calls
            ]
    return []


def _start(task_id: str, node: str, given: Any) -> dict[str, Any]:
    return {"id": task_id, "name": node, "input": given, "triggers": [f"branch:to:{node}"]}


def _result(
    task_id: str, node: str, written: dict[str, Any], interrupts: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "id": task_id,
        "name": node,
        "error": None,
        "result": written,
        "interrupts": interrupts or [],
    }


def debug_parts(mode: str, event: RecordedEvent, view: GraphView) -> list[tuple[str, Any]]:
    """The frames of one of `DEBUG_MODES` for the event, once the view has applied it."""
    match mode:
        case "tasks":
            return [("tasks", payload) for _, payload in task_parts(event, view)]
        case "checkpoints":
            return [("checkpoints", checkpoint_payload(view))] if is_checkpoint(event) else []
        case "debug":
            tasks = task_parts(event, view)
            checkpoint = [("checkpoint", checkpoint_payload(view))] if is_checkpoint(event) else []
            step = view.state.active_run.step if view.state.active_run else 0
            stamp = event.envelope.ts.isoformat()
            return [
                ("debug", {"type": kind, "timestamp": stamp, "step": step, "payload": payload})
                for kind, payload in (*tasks, *checkpoint)
            ]
    return []
