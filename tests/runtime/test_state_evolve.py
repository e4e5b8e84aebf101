"""The fold builds each state without `dataclasses.replace` (`state._evolve`) and stamps
the position on the state it just built: the result must be what `replace` would give,
and a state once built must never change."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agency.contracts.events import (
    AnyEvent,
    ChatMessage,
    MessageAppended,
    ModelStarted,
    RequestAccepted,
    RunCanceled,
    RunStarted,
    ThreadCreated,
)
from agency.domain.thread_state import ThreadState, _evolve, fold
from agency.infra.jetstream.envelopes import new_envelopes
from agency.infra.jetstream.ports import Append
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent

CANCEL_KEY = "cancel-key"


def recorded(events: list[AnyEvent], key_of: dict[int, str]) -> list[RecordedEvent]:
    """The events as the log would hold them, one append each (stream sequences 10, 20…)."""
    out: list[RecordedEvent] = []
    position = Position()
    for i, event in enumerate(events):
        (envelope,) = new_envelopes(
            Append("t1", "thread", "th1", [event], position, EventContext(agency_id="a1"),
                   idempotency_key=key_of.get(i))
        )  # fmt: skip
        record = RecordedEvent(envelope=envelope, stream_seq=(i + 1) * 10, subject="")
        out.append(record)
        position = record.position
    return out


EVENTS: list[AnyEvent] = [
    ThreadCreated(agency_id="a1", agent_type="plain"),
    RequestAccepted(
        run_id="r1", idempotency_key="k1", messages=(ChatMessage(role="user", content="hi"),)
    ),
    RunStarted(run_id="r1", agent_type="plain", max_steps=5),
    MessageAppended(run_id="r1", message=ChatMessage(role="user", content="hi")),
    ModelStarted(run_id="r1", step=1, model="m", message_count=1),
    RunCanceled(run_id="r1", reason="enough"),
]


def test_a_state_once_built_never_changes() -> None:
    events = recorded(EVENTS, {5: CANCEL_KEY})
    states = [ThreadState(tenant_id="t1", thread_id="th1")]
    snapshots = [replace(states[0])]
    for event in events:
        states.append(states[-1].apply(event))
        snapshots.append(replace(states[-1]))
    # Every state is still what it was when built, after everything applied since.
    assert states == snapshots
    assert [s.position for s in states[1:]] == [e.position for e in events]
    assert len({id(s) for s in states}) == len(states)
    final = states[-1]
    assert final == fold("t1", "th1", events)
    assert final.run("r1").status == "canceled"  # type: ignore[union-attr]
    assert final.command_keys == frozenset({CANCEL_KEY})
    assert final.last_event_at == events[-1].envelope.ts
    # `model.started` changes nothing but where the thread is.
    assert states[5].position == events[4].position and states[5].runs == states[4].runs


def test_evolve_gives_what_replace_gives_and_refuses_unknown_fields() -> None:
    state = fold("t1", "th1", recorded(EVENTS, {5: CANCEL_KEY}))
    changes = {"side_steps": 3, "model": "other", "queue": ()}
    assert _evolve(state, **changes) == replace(state, **changes)  # type: ignore[arg-type]
    assert _evolve(state) == state and _evolve(state) is not state
    with pytest.raises(TypeError, match="no field"):
        _evolve(state, not_a_field=1)
