"""What a `useChat` body asks for, decided without a server: the last user message's text,
or one decision on every call a paused run awaits."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from agency.contracts.events import ToolCall
from agency.services.api.aisdk.body import (
    Ask,
    ChatBody,
    Decide,
    NotMapped,
    approval_id,
    decision,
    request_of,
)

RUN = "run_X"
PENDING = (ToolCall(id="c1", name="lookup_guarded"), ToolCall(id="c2", name="lookup_guarded"))


def body(*messages: dict[str, Any], **extra: Any) -> ChatBody:
    raw = {"id": "chat", "messages": list(messages), **extra}
    return msgspec.convert(raw, ChatBody)


def user(*texts: str) -> dict[str, Any]:
    return {"id": "u1", "role": "user", "parts": [{"type": "text", "text": t} for t in texts]}


def answered(*answers: tuple[str, bool]) -> dict[str, Any]:
    parts = [
        {"type": "step-start"},
        *(
            {"type": "tool-lookup_guarded", "toolCallId": call, "state": "approval-responded",
             "input": {"word": "w"}, "approval": {"id": approval_id(RUN, call), "approved": ok}}
            for call, ok in answers
        ),
    ]  # fmt: skip
    return {"id": RUN, "role": "assistant", "parts": parts}


def test_the_last_user_messages_text_parts_are_the_input() -> None:
    asked = request_of(body(user("one", "two"), metadata={"kept": True}, model="ignored"))
    assert isinstance(asked, Ask)
    assert asked.message.content == "one\ntwo" and asked.key == "u1"


def test_approval_responses_decide_every_pending_call_together() -> None:
    asked = request_of(body(user("hi"), answered(("c1", True), ("c2", True))))
    assert isinstance(asked, Decide) and asked.message_id == RUN
    got = decision(asked, RUN, PENDING)
    assert got.approved is True


@pytest.mark.parametrize(
    ("answers", "said"),
    [
        ((("c1", True), ("c2", False)), "approving some tool calls and rejecting others"),
        ((("c1", True),), "1 of the 2 pending tool calls have no approval response"),
        ((("c1", True), ("c2", True), ("c3", True)), "has moved on"),
    ],
    ids=["mixed", "missing", "another-call"],
)
def test_a_decision_that_does_not_map_says_why(
    answers: tuple[tuple[str, bool], ...], said: str
) -> None:
    asked = request_of(body(user("hi"), answered(*answers)))
    assert isinstance(asked, Decide)
    with pytest.raises(NotMapped, match=said):
        decision(asked, RUN, PENDING)


def test_an_answer_for_an_earlier_run_is_not_one_the_chat_awaits() -> None:
    asked = request_of(body(user("hi"), answered(("c1", True), ("c2", True))))
    assert isinstance(asked, Decide)
    with pytest.raises(NotMapped, match="has moved on"):
        decision(asked, "run_Later", PENDING)


def test_an_assistant_message_without_answers_does_not_map() -> None:
    pending = {"id": RUN, "role": "assistant", "parts": [{"type": "tool-lookup", "toolCallId": "c1",
               "state": "approval-requested", "approval": {"id": "x"}}]}  # fmt: skip
    with pytest.raises(NotMapped, match="the last message must be the user's"):
        request_of(body(user("hi"), pending))
