"""A thread's events as the events of LangGraph's thread protocol (`POST
/threads/{id}/stream/events`), which the SDKs' `threads.stream` read.

Each event is `{"type": "event", "event_id", "seq", "method", "params": {"namespace",
"timestamp", "data", "node"?}}`. `seq` counts the protocol events of the thread from its
start, so a stream folded again from the log numbers them the same (a client's `since`
names one); `event_id` is the seq of the thread event it comes from (`<seq>.<n>` for the
n-th after the first), stable across connections, as the SDK drops an id it has seen.
Every event is in the root namespace (`[]`): subagents run in threads of their own.

A run (from `run.started`, or a resumed stretch from `hitl.resume`) opens with `lifecycle`
`running` and ends with `lifecycle` `completed`, `interrupted` (an approval awaited, or the
run canceled, as LangGraph maps its `interrupted` runs) or `failed` (with `error`).
Between: `messages` (`message-start`, `content-block-start` / `-delta` / `-finish`,
`message-finish`) for each model answer, its text streamed as the model streamed it and
its tool calls as `tool_call` blocks; `tools` (`tool-started`, `tool-finished`,
`tool-error`); `values` after each event that changed them; `updates` (`{"node", "values"}`:
`model` for a model answer, `tools` for a tool result, files and todos); and
`input.requested` (`{"interrupt_id", "payload"}`) when the run awaits approval; `tasks`
(a task's start and result, as the `tasks` stream mode sends them, `debug_parts.py`) and
`checkpoints` (`{"id", "parent_id", "step", "source"}` for each checkpoint the run makes:
the ids `state.listCheckpoints` lists).
"""

from __future__ import annotations

import json
from typing import Any

from agency.contracts import events as ev
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.langgraph.debug_parts import task_parts
from agency.services.api.langgraph.graphstate import GraphView, RunRef, ends_stretch, is_checkpoint
from agency.services.api.langgraph.messages import ai_message_id, interrupt_value, message_dict

# The channels a client may name, and the channel of each method.
CHANNELS = frozenset(
    {"values", "updates", "messages", "tools", "lifecycle", "input", "custom", "tasks"}
    | {"checkpoints"}
)
CHANNEL_OF = {"input.requested": "input"}

Part = tuple[str, dict[str, Any] | Any, str | None]  # method, data, node


class ProtocolEvents:
    """The protocol events of one thread; `after(event)` once the view has applied it."""

    def __init__(self, view: GraphView) -> None:
        self._view = view
        self._seq = 0
        self._open: dict[str, RunRef] = {}  # by our run id
        self._streamed: set[str] = set()  # model answers whose text was streamed

    def after(self, event: RecordedEvent) -> list[dict[str, Any]]:
        parts: list[Part] = []
        payload = event.payload
        match payload:
            case ev.RunStarted(run_id=run_id):
                parts.append(self._begin(RunRef(run_id)))
            case ev.HitlResume(run_id=run_id):
                pauses = self._view.pauses.get(run_id) or [event.seq]
                parts.append(self._begin(RunRef(run_id, pauses[-1])))
        of_run = getattr(payload, "run_id", None) or event.envelope.run_id
        ref = self._open.get(of_run) if isinstance(of_run, str) else None
        if ref is not None:
            parts.extend(self._parts(event))
            parts.extend(("tasks", data, data["name"]) for _, data in task_parts(event, self._view))
            if is_checkpoint(event):
                parts.append(("checkpoints", self._checkpoint(event), None))
            if ends_stretch(event, ref):
                del self._open[ref.run_id]
                parts.append(("lifecycle", self._end(event), None))
        return self._wrap(event, parts)

    def _graph(self) -> str:
        return str(self._view.metadata().get("graph_id") or self._view.state.agent_type)

    def _begin(self, ref: RunRef) -> Part:
        self._open[ref.run_id] = ref
        return ("lifecycle", {"event": "running", "graph_name": self._graph()}, None)

    def _checkpoint(self, event: RecordedEvent) -> dict[str, Any]:
        """The checkpoint the event made: its id (the one `state.listCheckpoints` lists and
        `state.fork` takes), its parent's, the run's step, and what made it."""
        view = self._view
        run = view.state.active_run
        payload = event.payload
        by_input = isinstance(payload, ev.MessageAppended) and payload.message.role == "user"
        data: dict[str, Any] = {
            "id": str(view.checkpoint_seq),
            "step": run.step if run is not None else 0,
            "source": "input" if by_input else "loop",
        }
        if view.parent_seq:
            data["parent_id"] = str(view.parent_seq)
        return data

    def _end(self, event: RecordedEvent) -> dict[str, Any]:
        data: dict[str, Any] = {"graph_name": self._graph()}
        match event.payload:
            case ev.RunCompleted():
                data["event"] = "completed"
            case ev.RunError(error=error):
                data.update(event="failed", error=error)
            case ev.RunPaused() | ev.RunCanceled():
                data["event"] = "interrupted"
            case _:  # a request refused
                data.update(event="failed", error="the run was rejected")
        return data

    def _parts(self, event: RecordedEvent) -> list[Part]:
        view = self._view
        match event.payload:
            case ev.ModelDelta(run_id=run_id, step=step, delta=delta):
                key = ai_message_id(run_id, step)
                out: list[Part] = []
                if key not in self._streamed:
                    self._streamed.add(key)
                    out.append(
                        ("messages", {"event": "message-start", "role": "ai", "id": key}, "model")
                    )
                    out.append(("messages", _block_start(0, {"type": "text", "text": ""}), "model"))
                delta_data = {
                    "event": "content-block-delta",
                    "index": 0,
                    "delta": {"type": "text-delta", "text": delta},
                }
                return [*out, ("messages", delta_data, "model")]
            case ev.ModelCompleted(run_id=run_id, step=step, message=message):
                return self._answer(ai_message_id(run_id, step), message.content, message)
            case ev.MessageAppended(message=message):
                out = [("values", view.values(), None)]
                if message.role in ("assistant", "tool"):
                    node = "model" if message.role == "assistant" else "tools"
                    update = {"node": node, "values": {"messages": [view.messages[-1]]}}
                    out.append(("updates", update, node))
                return out
            case ev.FileWritten(path=path, content=content):
                update = {"node": "tools", "values": {"files": {path: content}}}
                return [("values", view.values(), None), ("updates", update, "tools")]
            case ev.TodosWritten():
                update = {"node": "tools", "values": {"todos": view.values()["todos"]}}
                return [("values", view.values(), None), ("updates", update, "tools")]
            case ev.ToolStarted(tool_call_id=call_id, tool_name=name, arguments=arguments):
                started = _input(arguments)
                data = {"event": "tool-started", "tool_call_id": call_id, "tool_name": name}
                return [("tools", {**data, "input": started}, "tools")]
            case ev.ToolOutput(tool_call_id=call_id, output=output):
                data = {"event": "tool-finished", "tool_call_id": call_id, "output": output}
                return [("tools", data, "tools")]
            case ev.ToolError(tool_call_id=call_id, error=error):
                data = {"event": "tool-error", "tool_call_id": call_id, "message": error}
                return [("tools", data, "tools")]
            case ev.HitlInterrupt(run_id=run_id, proposed_tool_calls=calls):
                interrupt_id = view.interrupt_ids.get(run_id, run_id)
                asked = {"interrupt_id": interrupt_id, "payload": interrupt_value(calls)}
                return [("input.requested", asked, None)]
        return []

    def _answer(self, key: str, content: str, message: Any) -> list[Part]:
        """The end of a model answer: its text block finished (begun here when it was not
        streamed), a `tool_call` block per call, then `message-finish`."""
        out: list[Part] = []
        streamed = key in self._streamed
        self._streamed.discard(key)
        if not streamed:
            out.append(("messages", {"event": "message-start", "role": "ai", "id": key}, "model"))
        index = 0
        if streamed or content:
            text = {"type": "text", "text": content}
            if not streamed:
                out.append(("messages", _block_start(0, {"type": "text", "text": ""}), "model"))
                delta = {"type": "text-delta", "text": content}
                out.append(
                    (
                        "messages",
                        {"event": "content-block-delta", "index": 0, "delta": delta},
                        "model",
                    )
                )
            out.append(
                (
                    "messages",
                    {"event": "content-block-finish", "index": 0, "content": text},
                    "model",
                )
            )
            index = 1
        calls = message_dict(message, key).get("tool_calls", [])
        for offset, call in enumerate(calls):
            block = {
                "type": "tool_call",
                "id": call["id"],
                "name": call["name"],
                "args": call["args"],
            }
            out.append(("messages", _block_start(index + offset, block), "model"))
            finish = {"event": "content-block-finish", "index": index + offset, "content": block}
            out.append(("messages", finish, "model"))
        out.append(("messages", {"event": "message-finish"}, "model"))
        return out

    def _wrap(self, event: RecordedEvent, parts: list[Part]) -> list[dict[str, Any]]:
        timestamp = int(event.envelope.ts.timestamp() * 1000)
        wrapped = []
        for n, (method, data, node) in enumerate(parts):
            self._seq += 1
            params: dict[str, Any] = {"namespace": [], "timestamp": timestamp, "data": data}
            if node is not None:
                params["node"] = node
            wrapped.append(
                {
                    "type": "event",
                    "event_id": f"{event.seq}.{n}" if n else str(event.seq),
                    "seq": self._seq,
                    "method": method,
                    "params": params,
                }
            )
        return wrapped


def _input(arguments: str) -> Any:
    """A tool call's arguments as the object they encode (else the text as it came)."""
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return arguments


def _block_start(index: int, content: dict[str, Any]) -> dict[str, Any]:
    return {"event": "content-block-start", "index": index, "content": content}


def channel_of(method: str) -> str:
    return CHANNEL_OF.get(method, method)
