"""Explicit parent communication: an explicit child's results are never queued to its
parent; it escalates with `notify_parent` and `set_status` (tools, or hooks' context)."""

from __future__ import annotations

import pytest

from agency.contracts.events import (
    BlueprintSpec,
    ChildStatusSet,
    ParentNotified,
    ParentRef,
    SubagentCompleted,
    SubagentSpawned,
)
from agency.contracts.events.base import Event
from agency.domain.thread_state import fold
from agency.services.agents.escalation import NotAChild
from agency.services.agents.middleware import MiddlewareContext
from agency.services.agents.view import ThreadView
from agency.services.llm.fake_scripts import ScriptStep
from tests.runtime.conftest import Agents


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


def user_texts(events: list) -> list[str]:  # type: ignore[type-arg]
    return [
        e.payload.message.content
        for e in events
        if e.type == "message.appended" and e.payload.message.role == "user"
    ]


def answered_after_notice(events: list) -> bool:  # type: ignore[type-arg]
    """The parent took the child's notice up: a run ended after it came."""
    notice = next(
        (
            i
            for i, e in enumerate(events)
            if e.type == "message.appended" and "notifies you" in e.payload.message.content
        ),
        None,
    )
    return notice is not None and any(e.type == "run.completed" for e in events[notice:])


def first_user(request: dict[str, object], text: str) -> bool:
    users = [m for m in request["messages"] if m["role"] == "user"]  # type: ignore[attr-defined,index]
    return bool(users) and users[0]["content"] == text


def offered(request: dict[str, object]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}  # type: ignore[attr-defined,index,union-attr]


async def test_explicit_child_reports_only_what_it_sends(agents: Agents) -> None:
    key = "explicit-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[call("subagent_create", name="envoy", subagentType="liaison",
                                    message=f"investigate {key}-child")]),
        ScriptStep(content="carrying on meanwhile"),
        ScriptStep(content="thanks for the news"),
    ])  # fmt: skip
    agents.llm.script(f"{key}-child", [
        ScriptStep(tool_calls=[call("set_status", status="halfway there")]),
        ScriptStep(tool_calls=[call("notify_parent", content="found the culprit")]),
        ScriptStep(content="my final words, kept to myself"),
    ])  # fmt: skip
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    # The notice starts a run of the parent, or joins the one still executing. The child's
    # status, its notice and its end reach the parent from the subagents service, which
    # handles them concurrently: in any order.
    events = await agents.wait_for(
        parent,
        lambda es: (
            any(isinstance(e.payload, SubagentCompleted) for e in es)
            and any(e.type == "subagent.status" for e in es)
            and answered_after_notice(es)
        ),
        timeout=30,
    )
    (child,) = [e.payload.child_thread_id for e in events if isinstance(e.payload, SubagentSpawned)]
    child_events = await agents.wait_terminal(child)
    assert [e.type for e in child_events if e.type.startswith("run.")][-1] == "run.completed"
    assert any(isinstance(e.payload, ChildStatusSet) for e in child_events)
    assert any(isinstance(e.payload, ParentNotified) for e in child_events)

    # The notice reached the parent as a message; the child's final answer did not.
    texts = user_texts(events)
    assert texts[0] == key
    assert texts[1:] == [f"Subagent (reference: {child}) notifies you:\n\nfound the culprit"]
    assert not any("my final words" in t for t in texts)
    # The registry followed the child: its status text, and its outcome.
    at_status = next(i for i, e in enumerate(events) if e.type == "subagent.status")
    entry = fold(agents.tenant, parent, events[: at_status + 1]).child(child)
    assert entry is not None and entry.shown_status == "halfway there"
    assert entry.parent_communication == "explicit" and not entry.blocking
    final = fold(agents.tenant, parent, events).child(child)
    assert final is not None and final.status == "completed"
    # Only the explicit child has the tools; the parent has neither.
    child_request = next(
        r for r in agents.llm.requests if first_user(r, f"investigate {key}-child")
    )
    assert {"notify_parent", "set_status"} <= offered(child_request)
    parent_request = next(r for r in agents.llm.requests if first_user(r, key))
    assert not {"notify_parent", "set_status"} & offered(parent_request)


async def test_implicit_child_gets_no_escalation_tools_and_reports_by_itself(
    agents: Agents,
) -> None:
    key = "implicit-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[call("task", description=f"work {key}-child", subagentType="background")]),
        ScriptStep(content="started"),
        ScriptStep(content="got it"),
    ])  # fmt: skip
    agents.llm.script(f"{key}-child", [ScriptStep(content="background answer")])
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    events = await agents.wait_terminal(parent, count=2, timeout=30)
    assert any("has returned the following result" in t for t in user_texts(events))
    child_request = next(r for r in agents.llm.requests if first_user(r, f"work {key}-child"))
    assert not {"notify_parent", "set_status"} & offered(child_request)


def _context(parent: ParentRef | None) -> MiddlewareContext:
    state = ThreadView(tenant_id="t", thread_id="th", parent=parent)
    return MiddlewareContext(state=state, blueprint=BlueprintSpec(name="x"), run_id="r", step=1)


def test_hooks_escalate_through_their_context() -> None:
    ctx = _context(ParentRef(thread_id="p", token="k", tool_call_id="c"))
    ctx.notify_parent("a question for you")
    ctx.set_status("waiting")
    emitted: list[Event] = list(ctx.emitted)
    assert emitted == [
        ParentNotified(run_id="r", content="a question for you"),
        ChildStatusSet(run_id="r", status="waiting"),
    ]
    with pytest.raises(NotAChild):
        _context(None).notify_parent("nobody listens")
    with pytest.raises(ValueError, match="non-empty"):
        ctx.set_status("  ")
