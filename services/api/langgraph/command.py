"""A run's `command` (`{resume, update, goto}`), in our terms. Pure functions.

- `update` is a mapping of state keys, or LangGraph's list of `[key, value]` writes (one
  mapping: messages add up, files merge).
- `update` alone: the run's input (its `messages` and `files`), as LangGraph applies the
  update before the graph goes on.
- `update` with `resume`: the update goes with the decision (`runtime.approve`): its files
  are written at once, its messages appended after the step's tool results, before the
  next model call.
- `goto` names a node of the graph (`model` or `tools`, `routes_graph`): on a run paused
  before its tool calls, `tools` runs them (approves) and `model` skips them (rejects: the
  model is asked next); at a breakpoint before a model call, `model` goes on; on a thread
  that awaits nothing, `model` is a run (the model is asked), and `tools` has no calls to
  run (409)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from litestar.exceptions import ValidationException

from agency.services.api.langgraph.inputs import NODES, Invocation, invocation
from agency.services.api.langgraph.wire import RunCreate

Node = Literal["model", "tools"]
# What a resume with `goto` but no value decides on the calls it paused before.
SKIPPED = "skipped: the run went on to the model (command.goto 'model')"


@dataclass(frozen=True, slots=True)
class Goto:
    node: Node


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
    """`command.goto`: one node of the graph, by name (a list of one, too). A `Send` (a
    node with an input of its own) and a node the graph does not have are 400."""
    goto = data.command.goto if data.command is not None else None
    if goto is None or goto == []:
        return None
    if isinstance(goto, list) and len(goto) == 1:
        goto = goto[0]
    if isinstance(goto, dict):
        raise ValidationException(
            "command.goto with a Send (a node with its own input) does not map: name one "
            "node of the graph, 'model' or 'tools'"
        )
    if not isinstance(goto, str) or goto not in NODES:
        raise ValidationException(
            f"command.goto {str(goto)[:40]!r} is not a node of the graph: its nodes are "
            "'model' and 'tools' (GET /langgraph/assistants/{id}/graph)"
        )
    return Goto(node="model" if goto == "model" else "tools")
