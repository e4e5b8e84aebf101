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
    from collections.abc import Callable

    from agency.contracts.events import AnyEvent, ParentRef
    from agency.services.agents.view import ThreadView

NOTIFY_TOOL = "notify_parent"
STATUS_TOOL = "set_status"


def _text(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    return value if isinstance(value, str) else None


def _to_parent(
    tool: str,
    description: str,
    argument: tuple[str, str],
    event_of: Callable[[ThreadView, str, str], AnyEvent],
    done: str,
) -> StateTool:
    """The state tool `tool` of an explicit child: its one string `argument` (name and
    description) made into the event `event_of` gives, answered `done`."""
    key, about = argument

    def run(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
        value = _text(args, key)
        if value is None:
            return StateToolOutcome(f"{tool} needs a string `{key}`", error=True)
        try:
            event = event_of(state, run_id, value)
        except (NotAChild, ValueError) as e:
            return StateToolOutcome(str(e), error=True)
        return StateToolOutcome(done, events=(event,))

    parameters = object_schema([key], **{key: {"type": "string", "description": about}})
    return StateTool(ToolSpec(tool, description, parameters), run)


NOTIFY_PARENT = _to_parent(
    NOTIFY_TOOL,
    "Send your parent agent a message (a result, a question, a failure). "
    "Nothing else reaches it: it sees only what you send this way.",
    ("content", "the message"),
    notify_event,
    "Your parent will receive the message.",
)
SET_STATUS = _to_parent(
    STATUS_TOOL,
    "Set a short status line your parent agent sees in its list of "
    "subagents; you carry on working.",
    ("status", "e.g. 'halfway'"),
    status_event,
    "Status set in your parent's registry.",
)


def escalation_tools(parent: ParentRef | None) -> dict[str, StateTool]:
    """The tools of an explicit child (of this `parent`); none for any other thread."""
    if parent is None or parent.communication != "explicit":
        return {}
    return {NOTIFY_TOOL: NOTIFY_PARENT, STATUS_TOOL: SET_STATUS}
