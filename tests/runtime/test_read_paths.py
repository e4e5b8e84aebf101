"""What middleware sees as read: the paths of `read_file` calls answered without an error."""

from __future__ import annotations

import json

from agency.contracts.events import (
    AnyEvent,
    ChatMessage,
    MessageAppended,
    ThreadCreated,
    ToolCall,
    ToolError,
    ToolOutput,
)
from agency.contracts.records import EventContext, Position, RecordedEvent
from agency.domain.thread_state import fold
from agency.infra.jetstream.envelopes import new_envelopes
from agency.infra.jetstream.ports import Append
from agency.services.threads.view import thread_view


def thread(*payloads: AnyEvent) -> list[RecordedEvent]:
    envelopes = new_envelopes(
        Append("t1", "thread", "th1", list(payloads), Position(), EventContext())
    )
    return [
        RecordedEvent(envelope=e, stream_seq=i + 1, subject="") for i, e in enumerate(envelopes)
    ]


def call(call_id: str, name: str, path: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps({"path": path}))


def test_only_read_file_calls_answered_without_an_error_mark_a_path_read() -> None:
    calls = (
        call("c1", "read_file", "notes.md"),
        call("c2", "write_file", "draft.md"),
        call("c3", "read_file", "missing.md"),
    )
    state = fold(
        "t1",
        "th1",
        thread(
            ThreadCreated(agency_id="a", agent_type="x"),
            MessageAppended(message=ChatMessage(role="assistant", tool_calls=calls)),
            ToolOutput(run_id="r1", tool_call_id="c1", tool_name="read_file", output="1 hi"),
            ToolOutput(run_id="r1", tool_call_id="c2", tool_name="write_file", output="ok"),
            ToolError(run_id="r1", tool_call_id="c3", tool_name="read_file", error="no file"),
        ),
    )
    assert thread_view(state).read_paths == frozenset({"notes.md"})
