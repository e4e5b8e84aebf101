"""`threads.update_state`: a person adds to an idle thread's state, as events on its log.

`values` may hold `messages` (appended, `message.appended`), `files` (written,
`file.written`) and `todos` (replacing the plan, `todos.written`): `runtime.update_state`,
decided by the runtime on the thread it holds, refused while a run is active. `as_node`
(`model` or `tools`) makes the update as that node of the graph (`thread.state_updated`
first): what follows the node is the thread's `next` until its next run. At a past
`checkpoint_id`, the state is set back there first (`thread.state_restored`, `branch`),
in the same append: the update makes a branch. The answer's checkpoint is the last event
written.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar.exceptions import ClientException, ValidationException
from litestar.params import JSONBody

from agency.contracts.commands import UpdateThreadState
from agency.contracts.events import StateRestored, Todo
from agency.contracts.events.thread import GraphNode
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.answer import post_ok
from agency.services.api.langgraph.branch import checkpoint_seq, restore_of
from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.langgraph.inputs import invocation
from agency.services.api.langgraph.scope import LgCaller, ThreadIdPath, load_thread
from agency.services.api.langgraph.wire import Body, Checkpoint, Out
from agency.services.api.readback import send_and_read

_TODOS = msgspec.json.Decoder(tuple[Todo, ...])


class UpdateState(Body, frozen=True, kw_only=True):
    values: dict[str, Any] | list[Any] | None = None
    as_node: str | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None


class UpdateStateOut(Out, frozen=True, kw_only=True):
    checkpoint: Checkpoint


def _todos(raw: Any) -> tuple[Todo, ...]:
    try:
        return _TODOS.decode(msgspec.json.encode(raw))
    except msgspec.ValidationError as e:
        raise ValidationException(
            f"`todos` are {{content, status: pending|in_progress|completed}} objects: {e}"
        ) from e


def _as_node(node: str | None) -> GraphNode | None:
    """`as_node`: a node of the graph (`model` ⇄ `tools`), or none (also the graph's input,
    `__start__` or `__input__`, as a copied thread's first superstep names it)."""
    match node:
        case None | "__start__" | "__input__":
            return None
        case "model" | "tools":
            return node
    raise ValidationException(
        f"as_node {node[:40]!r} does not map: the graph's nodes are 'model' and 'tools' (an "
        "update as 'tools' makes 'model' next; as 'model', the answer's tool calls)"
    )


@post_ok(
    "/threads/{thread_id:str}/state",
    summary="LangGraph: add messages, files or todos to an idle thread",
)
async def update_state(
    thread_id: ThreadIdPath, data: JSONBody[UpdateState], caller: LgCaller
) -> UpdateStateOut:
    deps, tenant = caller.deps, caller.tenant
    view = await load_thread(deps, tenant, thread_id)
    if not isinstance(data.values, dict):
        raise ValidationException(
            "`values` must be an object of `messages`, `files` and `todos` (a list of "
            "updates per node does not map: an Agency thread has one state)"
        )
    wanted = data.checkpoint_id or (data.checkpoint or {}).get("checkpoint_id")
    seq = checkpoint_seq(wanted) if wanted is not None else view.checkpoint_seq
    # At a past checkpoint: the state is set back there first, in the same append.
    restore = await restore_of(deps, tenant, view, seq) if seq != view.checkpoint_seq else None
    await apply_update(deps, tenant, view, data.values, data.as_node, restore)
    now = await load_thread(deps, tenant, view.thread_id)
    return UpdateStateOut(
        checkpoint=Checkpoint(thread_id=now.thread_id, checkpoint_id=str(now.checkpoint_seq))
    )


async def apply_update(
    deps: ApiDeps,
    tenant: str,
    view: GraphView,
    given: dict[str, Any],
    node: str | None,
    restore: StateRestored | None = None,
) -> None:
    """Write one update of `messages`, `files` and `todos` as `node` (or none) on an idle
    thread: `runtime.update_state`, read back; 409 when a run is active or starts first."""
    as_node = _as_node(node)
    values = dict(given)
    todos = _todos(values.pop("todos")) if "todos" in values else None
    unknown = sorted(set(values) - {"messages", "files"})
    if unknown:
        raise ValidationException(
            f"`values` key {unknown[0][:80]!r} does not map: an Agency thread's state is "
            "`messages`, `files` and `todos`"
        )
    asked = invocation(values)
    if not asked.messages and not asked.files and todos is None:
        raise ValidationException("`values` holds nothing to add: `messages`, `files`, `todos`")
    assert view.created is not None
    if view.status() == "busy" or view.status() == "interrupted":
        raise ClientException(
            status_code=409,
            detail=f"thread {view.thread_id} is running: its state changes when the run ends",
        )
    command = UpdateThreadState(
        agency_id=view.created.agency_id,
        thread_id=view.thread_id,
        messages=asked.messages,
        files=asked.files,
        todos=todos,
        as_node=as_node,
        restore=restore,
    )
    written = await send_and_read(deps, tenant, "thread", view.thread_id, command)
    if written.event is None:
        now = await load_thread(deps, tenant, view.thread_id)
        if now.status() in ("busy", "interrupted"):
            raise ClientException(
                status_code=409,
                detail=f"a run of thread {view.thread_id} started first: its state was not changed",
            )


async def apply_supersteps(
    deps: ApiDeps, tenant: str, view: GraphView, supersteps: list[dict[str, Any]]
) -> GraphView:
    """`threads.create(supersteps=…)`: each superstep's updates (`{values, as_node}`), in
    order, as `update_state` writes them; the thread after them."""
    for n, superstep in enumerate(supersteps):
        updates = superstep.get("updates") if isinstance(superstep, dict) else None
        if not isinstance(updates, list):
            raise ValidationException(f"superstep {n} is not {{updates: [...]}}")
        for update in updates:
            if not isinstance(update, dict) or not isinstance(update.get("values"), dict):
                raise ValidationException(
                    f"an update of superstep {n} is not {{values: {{...}}, as_node?}}"
                )
            if update.get("command") is not None:
                raise ValidationException(f"superstep {n}: an update's `command` does not map")
            node = update.get("as_node")
            await apply_update(deps, tenant, view, update["values"], node if node else None)
            view = await load_thread(deps, tenant, view.thread_id)
    return view


THREAD_STATE_ROUTES = [update_state]
