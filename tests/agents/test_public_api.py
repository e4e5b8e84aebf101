"""The extension API: one package, every name documented."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import agency
from agency import ThreadView, ToolContext, ToolFailed
from agency.contracts.events import ParentRef
from agency.domain.thread_state import ThreadState
from agency.services.agents.builtin import WorkflowMiddleware
from agency.services.threads.view import thread_view


def _documented(name: str) -> bool:
    value = getattr(agency, name)
    doc = value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__
    # A dataclass without a docstring gets its signature as one.
    return bool(doc and doc.strip() and not doc.startswith(f"{value.__name__}("))


def test_every_public_name_is_documented() -> None:
    assert [name for name in agency.__all__ if not _documented(name)] == []


def test_the_code_agent_context_is_the_agents_own() -> None:
    assert agency.AgentContext.__module__ == "agency.services.agents.code_context"


def test_a_tool_is_given_no_event_store() -> None:
    given = {f.name for f in dataclasses.fields(ToolContext)}
    assert given == {
        "tenant_id", "agency_id", "thread_id", "run_id", "call_id", "attempt", "workflow",
    }  # fmt: skip


async def test_a_workflow_tool_run_without_a_workflow_says_why() -> None:
    (channel_send, *_) = WorkflowMiddleware().tools()
    ctx = ToolContext(tenant_id="t", agency_id="a", thread_id="th", run_id="r", call_id="c")
    with pytest.raises(ToolFailed, match="channel_send acts on a workflow"):
        await channel_send({"message": "hello"}, ctx)


def test_middleware_sees_a_view_of_the_thread_not_the_runtime_fold() -> None:
    parent = ParentRef(thread_id="p", token="k", tool_call_id="c")
    state = ThreadState(
        tenant_id="t", thread_id="th", parent=parent, files=(("a.md", "hello"),),
        keys=(("k1", "run-1"),), command_keys=frozenset({"cmd"}),
    )  # fmt: skip
    view = thread_view(state)
    assert isinstance(view, ThreadView)
    assert view.parent == parent and view.file("a.md") == "hello"
    for internal in ("position", "keys", "command_keys", "queue", "outcomes"):
        assert not hasattr(view, internal)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.thread_id = "other"  # type: ignore[misc]
