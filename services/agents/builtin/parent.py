"""A child's explicit escalation to its parent (the seed's `state.notifyParent(content)` and
`state.setStatus(status)`).

A child whose subagent entry says `parent_communication: explicit` reports nothing by
itself: its completion and failure are recorded in the parent's registry but never queued
to the parent. It escalates when it chooses, with two built-in tools the runtime gives it
(and only it):

- `notify_parent(content)`: the coordinator queues `content` to the parent as a message,
  like a report (it starts a parent run, or joins the active one);
- `set_status(status)`: the coordinator sets the child's status text in the parent's
  registry; the child goes on.

Middleware hooks of any child thread do the same through `MiddlewareContext.notify_parent`
and `MiddlewareContext.set_status`. Both only append an event to the child's own thread
(`subagent.parent_notified`, `subagent.status_set`); the coordinator writes to the parent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agency.services.agents.escalation import NotAChild, notify_event, status_event
from agency.services.agents.tools import StateTool, StateToolOutcome, ToolSpec, object_schema

if TYPE_CHECKING:
    from agency.contracts.events import ParentRef
    from agency.services.agents.view import ThreadView

NOTIFY_TOOL = "notify_parent"
STATUS_TOOL = "set_status"


def _text(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    return value if isinstance(value, str) else None


def _notify(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
    content = _text(args, "content")
    if content is None:
        return StateToolOutcome("notify_parent needs a string `content`", error=True)
    try:
        event = notify_event(state, run_id, content)
    except (NotAChild, ValueError) as e:
        return StateToolOutcome(str(e), error=True)
    return StateToolOutcome("Your parent will receive the message.", events=(event,))


def _status(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
    status = _text(args, "status")
    if status is None:
        return StateToolOutcome("set_status needs a string `status`", error=True)
    try:
        event = status_event(state, run_id, status)
    except (NotAChild, ValueError) as e:
        return StateToolOutcome(str(e), error=True)
    return StateToolOutcome("Status set in your parent's registry.", events=(event,))


NOTIFY_PARENT = StateTool(
    spec=ToolSpec(
        name=NOTIFY_TOOL,
        description="Send your parent agent a message (a result, a question, a failure). "
        "Nothing else reaches it: it sees only what you send this way.",
        parameters=object_schema(
            ["content"], content={"type": "string", "description": "the message"}
        ),
    ),
    fn=_notify,
)
SET_STATUS = StateTool(
    spec=ToolSpec(
        name=STATUS_TOOL,
        description="Set a short status line your parent agent sees in its list of "
        "subagents; you carry on working.",
        parameters=object_schema(
            ["status"], status={"type": "string", "description": "e.g. 'halfway'"}
        ),
    ),
    fn=_status,
)


def escalation_tools(parent: ParentRef | None) -> dict[str, StateTool]:
    """The tools of an explicit child (of this `parent`); none for any other thread."""
    if parent is None or parent.communication != "explicit":
        return {}
    return {NOTIFY_TOOL: NOTIFY_PARENT, STATUS_TOOL: SET_STATUS}
