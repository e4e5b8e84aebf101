"""A run's `command` (`{resume, update, goto}`), in our terms. Pure functions.

- `update` is a mapping of state keys, or LangGraph's list of `[key, value]` writes (one
  mapping: messages add up, files merge).
- `update` alone: the run's input (its `messages` and `files`), as LangGraph applies the
  update before the graph goes on.
- `update` with `resume`: the update goes with the decision (`runtime.approve`): its files
  are written at once, its messages appended after the step's tool results, before the
  next model call.
- `goto` names a node of the graph (`model` or `tools`, `routes_graph`), or holds `Send`s
  to `tools` of the calls a run paused before (as LangChain's agent routes its calls),
  which run them, edited where a Send's args differ. On a run paused
  before its tool calls, `tools` runs them (approves) and `model` skips them (rejects: the
  model is asked next); at a breakpoint before a model call, `model` goes on; on a thread
  that awaits nothing, `model` is a run (the model is asked), and `tools` has no calls to
  run (409)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from litestar.exceptions import ValidationException

from agency.contracts.events import ToolCall
from agency.services.api.approval import Approval
from agency.services.api.langgraph.inputs import NODES, Invocation, approval, invocation
from agency.services.api.langgraph.wire import RunCreate

Node = Literal["model", "tools"]
# What a resume with `goto` but no value decides on the calls it paused before.
SKIPPED = "skipped: the run went on to the model (command.goto 'model')"


@dataclass(frozen=True, slots=True)
class SentCall:
    """A tool call a `Send` to the 'tools' node runs: its id, and its name and args when
    the Send gives them (an edit, when they differ from the call's)."""

    id: str
    name: str | None = None
    args: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Goto:
    node: Node
    # The calls `Send`s to 'tools' run, one each; None when the node was named.
    sent: tuple[SentCall, ...] | None = None


def _merged(pairs: list[Any]) -> dict[str, Any]:
    """`command.update` as LangGraph's list of `(key, value)` writes, as one mapping: each
    write goes through its key's reducer, so messages add up and files merge."""
    merged: dict[str, Any] = {}
    for pair in pairs:
        if not (isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValidationException(
                "`command.update` as a list takes [key, value] pairs, such as "
                '[["messages", [...]], ["files", {...}]]'
            )
        key, value = pair
        if key == "messages":
            merged[key] = [*merged.get(key, []), *_listed(value)]
        elif key not in merged:
            merged[key] = value
        elif key == "files" and isinstance(value, dict) and isinstance(merged[key], dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _listed(messages: Any) -> list[Any]:
    return list(messages) if isinstance(messages, list | tuple) else [messages]


def _update(value: Any) -> dict[str, Any]:
    if isinstance(value, list):
        value = _merged(value)
    if not isinstance(value, dict):
        raise ValidationException(
            "`command.update` maps state keys (messages, files) to values, as a mapping or "
            "a list of [key, value] pairs"
        )
    other = sorted(k for k in value if k not in ("messages", "files"))
    if other:
        raise ValidationException(
            f"`command.update` of {', '.join(other)[:80]} does not map: a run starts from "
            "messages and files (todos: threads.update_state)"
        )
    return value


def update_with_resume(data: RunCreate) -> Invocation:
    """What `command.update` adds to the state with a resume (or a `goto` that resumes):
    messages of the conversation (no tool message: a step's calls are answered by its
    tools) and files."""
    command = data.command
    if command is None or not command.update:
        return Invocation(messages=(), files={})
    update = invocation(_update(command.update))
    if any(m.role == "tool" for m in update.messages):
        raise ValidationException(
            "`command.update` with a resume adds no tool message: the calls the run paused "
            "before are answered by their tools (or rejected)"
        )
    return update


def with_update_as_input(data: RunCreate) -> RunCreate:
    """A run with `command: {update}` and no resume: the update is the run's input."""
    command = data.command
    if command is None or not command.update or command.resume is not None or command.goto:
        return data
    if data.input:
        raise ValidationException("send `input` or `command.update`, not both")
    return msgspec.structs.replace(data, input=_update(command.update), command=None)


def goto_of(data: RunCreate) -> Goto | None:
    """`command.goto`: one node of the graph, by name (a list of one, too), or `Send`s to
    'tools' of the calls a run paused before (`{"node": "tools", "input": call}`, one
    each). Any other `Send` (a node with an input of its own) and a node the graph does
    not have are 400."""
    goto = data.command.goto if data.command is not None else None
    if goto is None or goto == []:
        return None
    items = goto if isinstance(goto, list) else [goto]
    if any(isinstance(item, dict) for item in items):
        return Goto(node="tools", sent=tuple(_sent(item) for item in items))
    if len(items) > 1:
        raise ValidationException(
            "command.goto names one node of the graph, 'model' or 'tools', not several"
        )
    goto = items[0]
    if not isinstance(goto, str) or goto not in NODES:
        raise ValidationException(
            f"command.goto {str(goto)[:40]!r} is not a node of the graph: its nodes are "
            "'model' and 'tools' (GET /langgraph/assistants/{id}/graph)"
        )
    return Goto(node="model" if goto == "model" else "tools")


_SENDS = (
    "Agency maps a Send to 'tools' of a tool call the run paused before, one per pending "
    "call (input: the call, {id, name?, args?}), or a node named ('model', 'tools')"
)


def _sent(item: Any) -> SentCall:
    """The tool call a `Send` to 'tools' runs: its input is the call (`{id, name, args}`),
    or LangChain's `{tool_call: {...}}` the agent's tool routing sends."""
    if not isinstance(item, dict):
        raise ValidationException(f"command.goto mixes a node name and Sends: {_SENDS}")
    node = item.get("node")
    if node != "tools":
        raise ValidationException(
            f"command.goto Send to {str(node)[:40]!r} does not map: a Send gives a node an "
            f"input of its own, and Agency's model reads the thread's conversation. {_SENDS}"
        )
    call = item.get("input", item.get("arg"))
    if isinstance(call, dict) and isinstance(call.get("tool_call"), dict):
        call = call["tool_call"]
    if not isinstance(call, dict) or not isinstance(call.get("id"), str):
        raise ValidationException(
            f"a Send to 'tools' takes the tool call it runs as its input: {_SENDS}"
        )
    name, args = call.get("name"), call.get("args")
    if not isinstance(name, str | None) or not isinstance(args, dict | None):
        raise ValidationException("a Send's tool call has a `name` string and an `args` object")
    return SentCall(id=call["id"], name=name, args=args)


def approval_of_sends(
    sent: tuple[SentCall, ...], pending: tuple[ToolCall, ...], resume: Any, interrupt_id: str
) -> Approval:
    """`Send`s to 'tools' of a paused run's calls: every pending call, once each, runs
    (approved), a Send's name or args that differ from its call's as an edit. A resume
    given with them must approve; the calls are edited in one place or the other."""
    calls = {c.id: c for c in pending}
    unknown = [s.id for s in sent if s.id not in calls]
    if unknown:
        raise ValidationException(
            f"command.goto sends call {unknown[0][:60]!r} to 'tools', not one the run paused "
            f"before: its pending calls are {', '.join(calls)[:200]}"
        )
    if sorted(s.id for s in sent) != sorted(calls):
        raise ValidationException(
            f"command.goto sends {len(sent)} Sends for {len(calls)} pending tool calls: send "
            "each pending call to 'tools' once; Agency runs or skips a step's calls together"
        )
    edits = tuple(
        ToolCall(id=s.id, name=s.name or calls[s.id].name, arguments=json.dumps(s.args))
        if s.args is not None
        else msgspec.structs.replace(calls[s.id], name=s.name or calls[s.id].name)
        for s in sent
        if _edits(s, calls[s.id])
    )
    if resume is None:
        return Approval(True, edits or None, "")
    decided = approval(resume, pending, interrupt_id)
    if not decided.approved:
        raise ValidationException(
            "command.goto Sends to 'tools' and a resume that rejects the pending tool calls "
            "contradict each other: the Sends run them"
        )
    if edits and decided.modified:
        raise ValidationException("edit the tool calls in the Sends or in the resume, not both")
    return Approval(True, edits or decided.modified, decided.reason)


def _edits(sent: SentCall, call: ToolCall) -> bool:
    if sent.name is not None and sent.name != call.name:
        return True
    if sent.args is None:
        return False
    try:
        return bool(json.loads(call.arguments) != sent.args)
    except ValueError:
        return True
