"""A misbehaving model in front of the real runtime: every run ends, with exactly one
terminal event, `run.error` naming what happened, or completes where the fault is one a
retry or the model itself can fix."""

from __future__ import annotations

from typing import Any

import pytest

from agency.contracts.events.run import RUN_TERMINAL_TYPES, RunError
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import Fault, ScriptStep
from tests.runtime.conftest import Agents

LOOKUP = {"name": "lookup", "arguments": {"word": "tea"}}
# Bounded: the slowest fault (a hang) takes three tries of 1.5 s.
WAIT = 30.0


def terminals(events: list[RecordedEvent]) -> list[RecordedEvent]:
    return [e for e in events if e.type in RUN_TERMINAL_TYPES]


def assert_well_formed(events: list[RecordedEvent]) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len(terminals(events)) == 1, [e.type for e in events]


async def run_once(agents: Agents, key: str, steps: list[Any]) -> list[RecordedEvent]:
    agents.llm.script(key, steps)
    thread = await agents.thread()
    await agents.invoke(thread, key)
    await agents.wait_terminal(thread, timeout=WAIT)
    events = await agents.events(thread)
    assert_well_formed(events)
    return events


@pytest.mark.parametrize(
    ("fault", "kind", "says"),
    [
        ("malformed_chunk", "malformed_response", "not JSON"),
        ("html", "malformed_response", "text/html"),
        ("not_openai_json", "not_openai_json", "not a chat completion"),
        ("hang", "timeout", "did not answer within"),
        ("stall", "timeout", "did not answer within"),
        ("truncated", "truncated_stream", "without a finish_reason"),
        ("disconnect", "truncated_stream", "broke off"),
    ],
)
async def test_a_model_fault_that_persists_ends_the_run_with_its_kind(
    agents: Agents, tenant: str, fault: Fault, kind: str, says: str
) -> None:
    key = f"{fault}-{tenant}"
    step = ScriptStep(content="a b c d", tool_calls=(LOOKUP, LOOKUP), fault=fault, times=99)

    events = await run_once(agents, key, [step])

    (end,) = terminals(events)
    assert isinstance(end.payload, RunError)
    assert end.payload.kind == kind, end.payload
    assert says in end.payload.error
    assert "tool.requested" not in [e.type for e in events]


async def test_server_errors_that_persist_end_the_run_as_http_5xx(
    agents: Agents, tenant: str
) -> None:
    key = f"5xx-{tenant}"

    events = await run_once(agents, key, [ScriptStep(status=500, times=99)])

    (end,) = terminals(events)
    assert isinstance(end.payload, RunError)
    assert end.payload.kind == "http_5xx" and "HTTP 500" in end.payload.error
    assert sum(1 for c in agents.llm.calls if c.key == key) == 3


@pytest.mark.parametrize(
    "step",
    [
        ScriptStep(content="recovered", status=500, times=2),
        ScriptStep(content="recovered", fault="truncated", fault_after=2),
        ScriptStep(content="recovered", fault="disconnect", fault_after=2),
        ScriptStep(content="recovered", fault="stall", fault_after=2),
    ],
    ids=["500-twice", "truncated-once", "disconnect-once", "stall-once"],
)
async def test_a_transient_fault_is_retried_and_the_run_completes(
    agents: Agents, tenant: str, step: ScriptStep
) -> None:
    key = f"transient-{tenant}"

    events = await run_once(agents, key, [step])

    assert terminals(events)[0].type == "run.completed"
    assert [e.payload.result for e in terminals(events)] == ["recovered"]


@pytest.mark.parametrize("fault", ["missing_tool_call_ids", "duplicate_tool_call_ids"])
async def test_tool_calls_without_ids_or_with_one_id_get_ids_and_the_run_completes(
    agents: Agents, tenant: str, fault: Fault
) -> None:
    key = f"no-ids-{tenant}"
    steps = [
        ScriptStep(tool_calls=(LOOKUP, LOOKUP), fault=fault),
        ScriptStep(content="looked up twice"),
    ]

    events = await run_once(agents, key, steps)

    requested = [e.payload.call.id for e in events if e.type == "tool.requested"]
    results = [e.payload.tool_call_id for e in events if e.type == "tool.output"]
    assert len(set(requested)) == 2 and sorted(results) == sorted(requested)
    assert terminals(events)[0].type == "run.completed"


async def test_invalid_tool_arguments_are_answered_with_a_tool_error_the_model_sees(
    agents: Agents, tenant: str
) -> None:
    key = f"bad-args-{tenant}"
    steps = [
        ScriptStep(tool_calls=({"name": "lookup", "arguments": '{"word": '},)),  # type: ignore[arg-type]
        ScriptStep(content="I will fix my arguments"),
    ]

    events = await run_once(agents, key, steps)

    (error,) = [e.payload for e in events if e.type == "tool.error"]
    assert "not valid JSON" in error.error
    assert terminals(events)[0].type == "run.completed"
    second = [r for r in agents.llm.requests if key in str(r)][-1]
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1 and "not valid JSON" in tool_messages[0]["content"]


async def test_a_huge_answer_ends_the_run_and_every_event_stays_readable(
    agents: Agents, tenant: str
) -> None:
    """3 MB of text is more than an event can hold: the run is truncated with a marker or
    ends in run.error; it never stays running, and the log keeps no hole."""
    key = f"huge-{tenant}"
    answer = "x" * 1023 + "\n"

    events = await run_once(agents, key, [ScriptStep(content=answer, repeat=3 * 1024)])

    (end,) = terminals(events)
    if end.type == "run.completed":
        (message,) = [e.payload.message for e in events if e.type == "message.appended"][-1:]
        assert len(message.content) < 3 * 1024 * 1024
        assert "[truncated:" in message.content
    else:
        assert end.type == "run.error"
