"""Our events as LangGraph stream parts, per stream mode.

Each event of a run becomes zero or more SSE frames, all with `id: <the event's seq>`, in
one write: `values` (the whole state after a change), `updates` (what a node returned:
`model` for the model's message, `tools` for tool results, files and todos), `messages`
(for `messages-tuple`: `[message chunk, metadata]`), `messages/metadata`,
`messages/partial` and `messages/complete` (for `messages`: each message's metadata once,
then the text so far, then the whole message), `events` (LangChain's `astream_events` v2
shape), `tasks`, `checkpoints` and `debug` (`debug_parts.py`). An approval pause is
`__interrupt__` in `values` and `updates`.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar.exceptions import ValidationException

from agency.contracts.events import (
    FileWritten,
    HitlInterrupt,
    MessageAppended,
    ModelCompleted,
    ModelDelta,
    ModelStarted,
    RunCompleted,
    RunError,
    RunPaused,
    RunStarted,
    TodosWritten,
    ToolError,
    ToolOutput,
    ToolStarted,
)
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.langgraph.debug_parts import DEBUG_MODES, debug_parts
from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.langgraph.messages import ai_message_id, message_dict

MODES = ("values", "updates", "messages-tuple", "messages", "events", "custom", *DEBUG_MODES)
# `custom` frames are what a graph's own code writes; an Agency run has none to send.


def stream_modes(raw: str | list[str] | None) -> tuple[str, ...]:
    """The modes asked for: a name, a list of them, or (as a query parameter may carry
    them) a JSON array of them; none is `values`."""
    given: list[Any] = []
    for item in [raw] if isinstance(raw, str) else list(raw or []):
        if isinstance(item, str) and item.startswith("["):
            try:
                item = msgspec.json.decode(item)
            except msgspec.DecodeError as e:
                raise ValidationException(f"stream_mode {item[:40]!r} is not a JSON list") from e
        given.extend(item if isinstance(item, list) else [item])
    if not all(isinstance(m, str) for m in given):
        raise ValidationException("stream_mode names modes: a string or a list of strings")
    modes = tuple(dict.fromkeys(m for m in given if m)) or ("values",)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValidationException(
            f"stream_mode {unknown[0][:40]!r} does not map; Agency streams " + ", ".join(MODES)
        )
    return modes


_encoder = msgspec.json.Encoder()


def frame(event: str, data: Any, seq: int | None) -> bytes:
    head = b"event: " + event.encode() + b"\n"
    tail = b"\nid: %d\n\n" % seq if seq is not None else b"\n\n"
    return head + b"data: " + _encoder.encode(data) + tail


class Parts:
    """Frames for one stream; `after(event, view)` once the view has applied the event."""

    def __init__(self, modes: tuple[str, ...], lg_run_id: str) -> None:
        self._modes = modes
        self._run = lg_run_id
        self._streamed: set[tuple[str, int]] = set()
        self._texts: dict[str, str] = {}  # `messages`: each streamed message's text so far

    def after(self, event: RecordedEvent, view: GraphView) -> bytes:
        out: list[bytes] = []
        for mode in self._modes:
            for name, data in self._parts(mode, event, view):
                out.append(frame(name, data, event.seq))
        if isinstance(event.payload, RunError):
            error = {"error": event.payload.kind, "message": event.payload.error}
            out.append(frame("error", error, event.seq))
        return b"".join(out)

    def _parts(self, mode: str, event: RecordedEvent, view: GraphView) -> list[tuple[str, Any]]:
        match mode:
            case "values":
                return self._values(event, view)
            case "updates":
                return self._updates(event, view)
            case "messages-tuple":
                return self._messages(event, view)
            case "messages":
                return self._whole_messages(event, view)
            case "events":
                return self._events(event, view)
            case "tasks" | "checkpoints" | "debug":
                return debug_parts(mode, event, view)
        return []

    def _values(self, event: RecordedEvent, view: GraphView) -> list[tuple[str, Any]]:
        match event.payload:
            case HitlInterrupt():
                return [("values", view.values_with_interrupts())]
            case MessageAppended() | FileWritten() | TodosWritten():
                return [("values", view.values())]
        return []

    def _updates(self, event: RecordedEvent, view: GraphView) -> list[tuple[str, Any]]:
        match event.payload:
            case HitlInterrupt():
                pending = view.values_with_interrupts().get("__interrupt__", [])
                return [("updates", {"__interrupt__": pending})]
            case RunPaused(reason="breakpoint"):
                # As LangGraph at a static breakpoint: an interrupt without values.
                return [("updates", {"__interrupt__": []})]
            case MessageAppended(message=message) if message.role in ("assistant", "tool"):
                node = "model" if message.role == "assistant" else "tools"
                return [("updates", {node: {"messages": [view.messages[-1]]}})]
            case FileWritten(path=path, content=content):
                return [("updates", {"tools": {"files": {path: content}}})]
            case TodosWritten():
                return [("updates", {"tools": {"todos": view.values()["todos"]}})]
        return []

    def _meta(self, view: GraphView, node: str, step: int) -> dict[str, Any]:
        return {
            "run_id": self._run,
            "thread_id": view.thread_id,
            "langgraph_node": node,
            "langgraph_step": step,
            "graph_id": view.metadata().get("graph_id"),
        }

    def _messages(self, event: RecordedEvent, view: GraphView) -> list[tuple[str, Any]]:
        match event.payload:
            case ModelDelta(run_id=run_id, step=step, delta=delta):
                self._streamed.add((run_id, step))
                chunk = _chunk(ai_message_id(run_id, step), delta, [])
                return [("messages", [chunk, self._meta(view, "model", step)])]
            case ModelCompleted(run_id=run_id, step=step, message=message):
                calls = message_dict(message, "")["tool_calls"]
                streamed = (run_id, step) in self._streamed
                if streamed and not calls:
                    return []
                content = "" if streamed else message.content
                chunk = _chunk(ai_message_id(run_id, step), content, calls)
                return [("messages", [chunk, self._meta(view, "model", step)])]
            case MessageAppended(message=message) if message.role == "tool":
                step = view.state.active_run.step if view.state.active_run else 0
                return [("messages", [view.messages[-1], self._meta(view, "tools", step)])]
        return []

    def _whole_messages(self, event: RecordedEvent, view: GraphView) -> list[tuple[str, Any]]:
        """LangGraph's `messages` mode: `messages/metadata` when a message first appears,
        `messages/partial` with its text so far for each streamed piece, and
        `messages/complete` with the whole message once it is final."""
        match event.payload:
            case ModelDelta(run_id=run_id, step=step, delta=delta):
                key = ai_message_id(run_id, step)
                out = [] if key in self._texts else [self._head(key, view, "model", step)]
                self._texts[key] = self._texts.get(key, "") + delta
                partial = {**_chunk(key, self._texts[key], []), "type": "ai"}
                return [*out, ("messages/partial", [partial])]
            case ModelCompleted(run_id=run_id, step=step, message=message):
                key = ai_message_id(run_id, step)
                out = [] if key in self._texts else [self._head(key, view, "model", step)]
                self._texts.pop(key, None)
                return [*out, ("messages/complete", [message_dict(message, key)])]
            case MessageAppended(message=message) if message.role == "tool":
                step = view.state.active_run.step if view.state.active_run else 0
                tool = view.messages[-1]
                head = self._head(str(tool.get("id") or ""), view, "tools", step)
                return [head, ("messages/complete", [tool])]
        return []

    def _head(self, key: str, view: GraphView, node: str, step: int) -> tuple[str, Any]:
        return ("messages/metadata", {key: {"metadata": self._meta(view, node, step)}})

    def _events(self, event: RecordedEvent, view: GraphView) -> list[tuple[str, Any]]:
        payload = event.payload
        graph = str(view.metadata().get("graph_id", ""))
        match payload:
            case RunStarted():
                data: dict[str, Any] = {"input": None}
                return [("events", self._event("on_chain_start", graph, data, view, 0))]
            case RunCompleted():
                data = {"output": view.values()}
                return [("events", self._event("on_chain_end", graph, data, view, 0))]
            case ModelStarted(step=step, model=model):
                return [("events", self._event("on_chat_model_start", model, {}, view, step))]
            case ModelDelta(run_id=run_id, step=step, delta=delta):
                data = {"chunk": _chunk(ai_message_id(run_id, step), delta, [])}
                return [
                    (
                        "events",
                        self._event("on_chat_model_stream", view.state.model, data, view, step),
                    )
                ]
            case ModelCompleted(run_id=run_id, step=step, message=message, model=model):
                data = {"output": message_dict(message, ai_message_id(run_id, step))}
                return [("events", self._event("on_chat_model_end", model, data, view, step))]
            case ToolStarted(tool_name=name, arguments=arguments):
                data = {"input": arguments}
                return [("events", self._event("on_tool_start", name, data, view, 0))]
            case ToolOutput(tool_name=name, output=output):
                data = {"output": output}
                return [("events", self._event("on_tool_end", name, data, view, 0))]
            case ToolError(tool_name=name, error=error):
                data = {"error": error}
                return [("events", self._event("on_tool_error", name, data, view, 0))]
        return []

    def _event(
        self, kind: str, name: str, data: dict[str, Any], view: GraphView, step: int
    ) -> dict[str, Any]:
        node = "model" if "chat_model" in kind else "tools" if "tool" in kind else ""
        return {
            "event": kind,
            "name": name,
            "run_id": self._run,
            "tags": [],
            "metadata": self._meta(view, node, step),
            "data": data,
            "parent_ids": [],
        }


def _chunk(message_id: str, content: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "AIMessageChunk",
        "id": message_id,
        "content": content,
        "additional_kwargs": {},
        "response_metadata": {},
        "name": None,
        "tool_calls": calls,
        "invalid_tool_calls": [],
        "tool_call_chunks": [],
        "usage_metadata": None,
    }
