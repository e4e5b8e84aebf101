"""What each kind is made of, and the schedule of attempts: pure functions, no system."""

from __future__ import annotations

import json
import random

import pytest

from agency.contracts.events import (
    AnyEvent,
    ProposalOpened,
    RunPaused,
    SubagentCompleted,
)
from agency.contracts.subjects import Aggregate, aggregate_events_filter
from agency.infra.jetstream.envelopes import new_envelopes
from agency.infra.jetstream.ports import Append
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent
from agency.services.webhooks.deliveries import SCHEDULE, delivery_id
from agency.services.webhooks.kinds import KIND_OF_TYPE, message_of


def recorded(
    event: AnyEvent, aggregate: Aggregate = "thread", agency: str | None = "a1"
) -> RecordedEvent:
    context = EventContext(agency_id=agency, run_id="r1")
    (envelope,) = new_envelopes(Append("t1", aggregate, "x1", [event], Position(), context))
    return RecordedEvent(envelope=envelope, stream_seq=1, subject="")


def test_a_subagents_report_is_subagent_reported_on_the_parents_thread() -> None:
    report = SubagentCompleted(
        run_id="r1", tool_call_id="c1", child_thread_id="child", outcome="completed", report="ok"
    )
    made = message_of(recorded(report))
    assert made is not None
    kind, body = made
    sent = json.loads(body)
    assert kind == sent["type"] == "subagent.reported"
    assert sent["data"] == {
        "agencyId": "a1", "eventId": sent["data"]["eventId"], "threadId": "x1", "runId": "r1",
        "childThreadId": "child", "toolCallId": "c1", "outcome": "completed", "report": "ok",
    }  # fmt: skip


def test_a_proposal_is_workflow_proposal_naming_its_workflow() -> None:
    opened = ProposalOpened(
        proposal_id="p1", title="Ship?", options=("yes", "no"), author="lead", voters=("a", "b")
    )
    made = message_of(recorded(opened, "workflow"))
    assert made is not None
    sent = json.loads(made[1])
    assert sent["type"] == "workflow.proposal"
    assert sent["data"]["workflowId"] == "x1" and "threadId" not in sent["data"]
    assert sent["data"]["options"] == ["yes", "no"] and sent["data"]["voters"] == ["a", "b"]


@pytest.mark.parametrize(
    "event",
    [
        RunPaused(run_id="r1", reason="hitl"),
        SubagentCompleted(run_id="r1", tool_call_id="c1", child_thread_id="c", outcome="error"),
    ],
    ids=["no-kind", "no-agency"],
)
def test_an_event_of_no_kind_or_no_agency_makes_no_delivery(event: AnyEvent) -> None:
    agency = None if isinstance(event, SubagentCompleted) else "a1"
    assert message_of(recorded(event, agency=agency)) is None


def test_the_consumer_reads_every_type_a_kind_is_made_of_from_its_aggregate() -> None:
    from agency.services.webhooks.fanout import SUBSCRIBED_EVENTS

    config = SUBSCRIBED_EVENTS.config()
    assert config.filter_subject is None
    assert set(config.filter_subjects or ()) == {
        aggregate_events_filter("thread"),
        aggregate_events_filter("workflow"),
    }
    assert all(SUBSCRIBED_EVENTS.wants(t) for t in KIND_OF_TYPE)
    assert not SUBSCRIBED_EVENTS.wants("message.delta")


def test_a_delivery_keeps_one_id_per_subscription_and_event() -> None:
    assert delivery_id("wh_1", "e1") == delivery_id("wh_1", "e1")
    assert (
        len({delivery_id("wh_1", "e1"), delivery_id("wh_2", "e1"), delivery_id("wh_1", "e2")}) == 3
    )


def test_the_schedule_spreads_attempts_over_about_a_day() -> None:
    random.seed(0)
    at, waits = 0.0, list[float]()
    assert SCHEDULE.timeout is not None
    while at + (wait := SCHEDULE.delay(len(waits) + 1)) <= SCHEDULE.timeout:
        waits.append(wait)
        at += wait
    assert 5 <= waits[0] < 7 and len(waits) >= 6
    assert 20 * 3600 < at <= 24 * 3600  # the last attempt, within the day
