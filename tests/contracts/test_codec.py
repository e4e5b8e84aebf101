"""Round trips, strictness and upcasting of wire messages."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from agency.contracts import codec
from agency.contracts.codec import (
    _UPCASTERS,
    EVENT_TYPES,
    decode_command,
    decode_event,
    encode,
    readable_event,
    register_upcaster,
)
from agency.contracts.commands import CommandEnvelope, InvokeThread
from agency.contracts.envelope import Envelope, utc_now
from agency.contracts.errors import DecodeError, UpcastError
from agency.contracts.events import (
    ChatMessage,
    ModelCompleted,
    RequestAccepted,
    ToolError,
    ToolStarted,
    Usage,
)

BRIEF_CATALOGUE = {
    "thread.created", "request.accepted", "run.started", "run.tick", "run.paused",
    "run.resumed", "run.canceled", "agent.started", "agent.completed", "agent.error",
    "checkpoint.saved", "model.started", "model.delta", "model.completed",
    "middleware.before_model", "middleware.after_model", "tool.started", "tool.output",
    "tool.error", "hitl.interrupt", "hitl.resume", "subagent.spawned", "subagent.completed",
}  # fmt: skip


def invoke_command() -> CommandEnvelope:
    """A `runtime.invoke` command as sent."""
    return CommandEnvelope(
        command_id="c1",
        tenant_id="acme",
        idempotency_key="k",
        ts=utc_now(),
        type="runtime.invoke",
        payload=InvokeThread(agency_id="a", thread_id="t", run_id="r"),
    )


def envelope(payload: Any, version: int = 1) -> Envelope:
    return Envelope(
        event_id="e1",
        tenant_id="acme",
        aggregate="thread",
        aggregate_id="th1",
        seq=1,
        ts=utc_now(),
        type=payload.__struct_config__.tag,
        version=version,
        payload=payload,
    )


def test_every_event_of_the_brief_catalogue_has_a_contract() -> None:
    assert set(EVENT_TYPES) >= BRIEF_CATALOGUE


def test_event_round_trips_through_the_wire() -> None:
    original = envelope(
        ModelCompleted(
            run_id="r",
            step=2,
            model="openai:gpt-4.1-mini",
            message=ChatMessage(role="assistant", content="done"),
            usage=Usage(input_tokens=10, output_tokens=3),
        )
    )
    assert decode_event(encode(original)) == original


def test_type_that_does_not_match_payload_is_refused() -> None:
    data = encode(
        envelope(ToolStarted(run_id="r", tool_call_id="c", tool_name="n", arguments="{}"))
    )
    forged = data.replace(b'"type":"tool.started","version"', b'"type":"tool.output","version"', 1)
    with pytest.raises(DecodeError, match="does not match"):
        decode_event(forged)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b"{}", id="empty-object"),
        pytest.param(b'{"event_id": 1}', id="wrong-type"),
    ],
)
def test_malformed_events_raise_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_event(data)


def test_a_listener_reads_an_event_or_skips_what_is_not_one() -> None:
    original = envelope(ToolStarted(run_id="r", tool_call_id="c", tool_name="n", arguments="{}"))
    assert readable_event(encode(original)) == original
    forged = encode(original).replace(b'"type":"tool.started"', b'"type":"tool.output"', 1)
    for data in (b"not json", b"{}", b'{"event_id": 1}', forged):
        assert readable_event(data) is None


def test_old_version_is_upcast_on_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A v1 tool.started with `args` instead of `arguments`, read by code that writes v2."""
    monkeypatch.setattr(ToolStarted, "schema_version", 2)
    monkeypatch.setattr(codec, "_UPCASTERS", dict(_UPCASTERS))

    @register_upcaster("tool.started", 1)
    def rename_args(fields: dict[str, Any]) -> dict[str, Any]:
        fields["arguments"] = fields.pop("args")
        return fields

    old = msgspec.json.encode(
        {
            "event_id": "e1", "tenant_id": "acme", "aggregate": "thread", "aggregate_id": "th",
            "seq": 1, "ts": "2026-01-01T00:00:00Z", "type": "tool.started", "version": 1,
            "payload": {"type": "tool.started", "run_id": "r", "tool_call_id": "c",
                        "tool_name": "n", "args": '{"x": 1}'},
        }
    )  # fmt: skip
    decoded = decode_event(old)
    assert decoded.version == 2
    assert decoded.payload == ToolStarted(
        run_id="r", tool_call_id="c", tool_name="n", arguments='{"x": 1}'
    )


def test_a_tool_error_stored_before_raised_at_existed_reads_with_none() -> None:
    stored = msgspec.json.encode(
        {
            "event_id": "e1", "tenant_id": "acme", "aggregate": "thread", "aggregate_id": "th",
            "seq": 1, "ts": "2026-01-01T00:00:00Z", "type": "tool.error", "version": 1,
            "payload": {"type": "tool.error", "run_id": "r", "tool_call_id": "c",
                        "tool_name": "n", "error": "KeyError: 'x'", "attempts": 1},
        }
    )  # fmt: skip
    assert decode_event(stored).payload == ToolError(
        run_id="r", tool_call_id="c", tool_name="n", error="KeyError: 'x'", raised_at=""
    )


def test_missing_upcaster_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ToolStarted, "schema_version", 3)
    data = encode(
        envelope(ToolStarted(run_id="r", tool_call_id="c", tool_name="n", arguments="{}"))
    )
    with pytest.raises(UpcastError, match="from version 1 to 3"):
        decode_event(data)


def test_command_whose_type_does_not_match_its_payload_is_refused() -> None:
    good = invoke_command()
    assert decode_command(encode(good)) == good
    with pytest.raises(DecodeError, match="does not match"):
        decode_command(
            encode(good).replace(
                b'"type":"runtime.invoke","version"', b'"type":"runtime.cancel","version"'
            )
        )


def test_an_invoke_and_its_acceptance_stored_before_breakpoints_read_without_a_pause() -> None:
    stored = msgspec.json.encode(
        {
            "event_id": "e1", "tenant_id": "acme", "aggregate": "thread", "aggregate_id": "th",
            "seq": 1, "ts": "2026-01-01T00:00:00Z", "type": "request.accepted", "version": 1,
            "payload": {"type": "request.accepted", "run_id": "r", "idempotency_key": "k",
                        "stream_modes": ["values"]},
        }
    )  # fmt: skip
    accepted = decode_event(stored).payload
    assert accepted == RequestAccepted(run_id="r", idempotency_key="k", stream_modes=("values",))
    assert accepted.pause_before_tools is False  # type: ignore[attr-defined]
    command = invoke_command()
    old = encode(command)
    for field in (b"pause_before_tools", b"pause_before_model", b"pause_after_tools"):
        old = old.replace(b',"' + field + b'":false', b"")
        assert field not in old
    assert decode_command(old).payload == InvokeThread(agency_id="a", thread_id="t", run_id="r")
    paused = RequestAccepted(run_id="r", idempotency_key="k", pause_before_tools=True)
    assert decode_event(encode(envelope(paused))).payload == paused
