"""The thread protocol's state, agent and injection commands (`POST /threads/{id}/commands`).

- `state.get`: the thread's values (only `keys`, when named) and its checkpoint, as
  `threads.get_state` reads them.
- `state.listCheckpoints`: its checkpoints newest first (`limit`, `before` a checkpoint
  id), as `threads.get_history` lists them: id, time, step and metadata.
- `state.fork`: a fork of the thread at `checkpoint_id` (a new thread, as `threads.copy`
  and `agency fork` make one: the log keeps the original whole) and a run of it with
  `input`; the answer names both.
- `agent.getTree`: the thread's agent and, below it, its subagents' threads (each in a
  thread of its own, named by `metadata.thread_id`; their events stream there).
- `input.inject`: a message for the active run, which takes it up before its next model
  call (an invoke with the `enqueue` strategy: `request.injected`); on an idle thread it
  starts a run.

Agency's events are all in the root namespace: a command naming another is a 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar.exceptions import NotFoundException, ValidationException

from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.langgraph.routes_thread_admin import fork_thread
from agency.services.api.langgraph.routes_threads import history
from agency.services.api.langgraph.scope import load_thread, thread_id_of
from agency.services.api.langgraph.snapshot import state_out
from agency.services.api.langgraph.start import begin_run
from agency.services.api.langgraph.wire import Connection, RunCreate
from agency.services.threads.reads import read_thread, thread_creations
from agency.services.threads.tree import descendants

MAX_CHECKPOINTS = 1000
# A thread's LangGraph status as the protocol's agent status.
_AGENT_STATUS = {"idle": "completed", "busy": "running", "interrupted": "interrupted"}


@dataclass(frozen=True, slots=True)
class ThreadCall:
    """Who sends a protocol command, on which thread: what each command acts with."""

    deps: ApiDeps
    tenant: str
    thread_id: str
    request: Connection


def root_namespace(params: dict[str, Any], command: str) -> None:
    namespace = params.get("namespace")
    if namespace not in (None, []):
        raise NotFoundException(
            f"{command}: no namespace {str(namespace)[:80]}: Agency's events are in the root "
            "namespace (subagents run in threads of their own: agent.getTree names them)"
        )


async def state_get(call: ThreadCall, params: dict[str, Any]) -> dict[str, Any]:
    root_namespace(params, "state.get")
    keys = params.get("keys")
    if keys is not None and not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise ValidationException("state.get: keys must be a list of state keys")
    state = state_out(await load_thread(call.deps, call.tenant, call.thread_id, deferred=True))
    values = state.values
    if keys is not None:
        values = {k: v for k, v in values.items() if k in keys}
    return {"values": values, "checkpoint": {"id": state.checkpoint.checkpoint_id}}


async def list_checkpoints(call: ThreadCall, params: dict[str, Any]) -> dict[str, Any]:
    root_namespace(params, "state.listCheckpoints")
    limit, before = params.get("limit", 10), params.get("before")
    if not isinstance(limit, int) or not 1 <= limit <= MAX_CHECKPOINTS:
        raise ValidationException(f"state.listCheckpoints: limit must be 1 to {MAX_CHECKPOINTS}")
    if before is not None and not (isinstance(before, str) and before.isdigit()):
        raise ValidationException("state.listCheckpoints: before is a checkpoint id (digits)")
    upto = int(before) if before else None
    states = await history(call.deps, call.tenant, call.thread_id, upto, limit)
    return {
        "checkpoints": [
            {
                "id": s.checkpoint.checkpoint_id,
                "timestamp": s.created_at.isoformat() if s.created_at else "",
                "step": s.metadata.get("step", 0),
                "metadata": s.metadata,
            }
            for s in states
        ]
    }


async def state_fork(call: ThreadCall, params: dict[str, Any]) -> dict[str, Any]:
    checkpoint = params.get("checkpoint_id")
    if not isinstance(checkpoint, str) or not checkpoint.isdigit() or len(checkpoint) > 18:
        raise ValidationException("state.fork needs a checkpoint_id (a checkpoint's id: digits)")
    if params.get("input") is None:
        raise ValidationException(
            "state.fork needs an input: the fork is a new thread, and its run starts from input"
        )
    view = await load_thread(call.deps, call.tenant, call.thread_id)
    fork_id = await fork_thread(call.deps, call.tenant, view, int(checkpoint))
    data = RunCreate(assistant_id=view.state.agent_type, input=params["input"])
    begun = await begin_run(call.deps, call.tenant, fork_id, data, call.request)
    return {"run_id": begun.ref.id, "thread_id": fork_id}


def _node(view: GraphView, namespace: list[str], children: list[Any]) -> dict[str, Any]:
    node: dict[str, Any] = {
        "namespace": namespace,
        "status": _AGENT_STATUS.get(view.status(), "failed"),
        "graph_name": view.state.agent_type,
        "metadata": {"thread_id": view.thread_id},
    }
    if children:
        node["children"] = children
    return node


async def agent_tree(call: ThreadCall, params: dict[str, Any]) -> dict[str, Any]:
    deps, tenant = call.deps, call.tenant
    root = await load_thread(deps, tenant, call.thread_id)
    events = await read_thread(deps.bus.store, tenant, root.thread_id)
    # Children are created after their parent: the scan starts at the root's creation.
    creations = await thread_creations(
        deps.bus.nc, tenant, start_seq=events[0].stream_seq, layout=deps.bus.layout
    )
    children_of: dict[str, list[str]] = {}
    for child, parent, _ in descendants(creations, root.thread_id):
        children_of.setdefault(parent, []).append(child)

    async def node(view: GraphView, namespace: list[str]) -> dict[str, Any]:
        kids = children_of.get(view.thread_id, [])
        below = [await node(await load_thread(deps, tenant, kid), [kid]) for kid in kids]
        return _node(view, namespace, below)

    return {"tree": await node(root, [])}


async def input_inject(call: ThreadCall, params: dict[str, Any]) -> dict[str, Any]:
    root_namespace(params, "input.inject")
    message = params.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), str):
        raise ValidationException("input.inject needs a message with text content")
    if message.get("role", "user") not in ("user", "system"):
        raise ValidationException("input.inject: a message's role is user or system")
    view = await load_thread(call.deps, call.tenant, thread_id_of(call.thread_id))
    data = RunCreate(
        assistant_id=view.state.agent_type,
        input={"messages": [{"role": message.get("role", "user"), "content": message["content"]}]},
        multitask_strategy="enqueue",
    )
    await begin_run(call.deps, call.tenant, view.thread_id, data, call.request)
    return {}


async def subscription_reconnect(call: ThreadCall, params: dict[str, Any]) -> dict[str, Any]:
    """`restored: false`: a subscription lives as long as its stream or socket, so a client
    subscribes again after a reconnect, with `since` its last `seq` (nothing is lost: the
    thread's events are folded from the log). The thread is checked to be the caller's."""
    await load_thread(call.deps, call.tenant, call.thread_id)
    return {"restored": False}
