"""A run from a past checkpoint (`checkpoint_id`, or `checkpoint: {checkpoint_id}`): the
thread's state is set back to that checkpoint's, appended as an update of its state
(`runtime.update_state` with `restore`: a `thread.state_restored` holding the messages,
files and todos as they were), then the run starts from there. Nothing is removed: the log
keeps what followed the checkpoint, and the history shows the branch (the restored
checkpoint's parent is the one it was set back to)."""

from __future__ import annotations

import msgspec
from litestar.exceptions import ClientException, NotFoundException, ValidationException

from agency.contracts.commands import UpdateThreadState
from agency.contracts.events import StateRestored
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.langgraph.scope import load_thread
from agency.services.api.langgraph.wire import RunCreate
from agency.services.api.readback import send_and_read

# What a restore may weigh, encoded, as a share of the broker's largest message: one event
# carries the whole state.
_PAYLOAD_SHARE = 0.9


def checkpoint_seq(given: object) -> int:
    """A checkpoint id: the seq of one of the thread's events."""
    if not isinstance(given, str) or not given.isdigit() or len(given) > 18:
        raise ValidationException(
            f"checkpoint_id {str(given)[:40]!r} is not one of ours: an event seq (digits)"
        )
    return int(given)


def checkpoint_asked(data: RunCreate) -> int | None:
    """The checkpoint a run asks to start from, if any."""
    given = data.checkpoint_id or (data.checkpoint or {}).get("checkpoint_id")
    return None if given is None else checkpoint_seq(given)


async def restore_of(deps: ApiDeps, tenant: str, view: GraphView, seq: int) -> StateRestored:
    """The thread's state at its checkpoint `seq`, as the event that sets it back there;
    404 for a checkpoint it does not have, 409 while it runs, 413 for a state too large for
    one event."""
    if view.created is None or seq > view.last_seq:
        raise NotFoundException(f"thread {view.thread_id} has no checkpoint {seq}")
    if view.status() in ("busy", "interrupted"):
        raise ClientException(
            status_code=409,
            detail=f"thread {view.thread_id} is running: it is set back to a past checkpoint "
            "only while idle (cancel the run first)",
        )
    at = await load_thread(deps, tenant, view.thread_id, seq)
    if at.checkpoint_seq != seq:
        raise NotFoundException(
            f"event {seq} of thread {view.thread_id} is not a checkpoint "
            "(threads.get_history lists them)"
        )
    restore = StateRestored(
        from_seq=seq,
        messages=at.state.messages,
        files=dict(at.state.files),
        todos=at.state.todos,
        message_ids=tuple(str(m["id"]) for m in at.messages),
    )
    size, limit = len(msgspec.json.encode(restore)), int(deps.bus.nc.max_payload * _PAYLOAD_SHARE)
    if size > limit:
        raise ClientException(
            status_code=413,
            detail=f"the state at checkpoint {seq} is {size} bytes, more than the {limit} one "
            "event may hold: fork the thread there instead (`agency fork`)",
        )
    return restore


async def branched(deps: ApiDeps, tenant: str, view: GraphView, data: RunCreate) -> GraphView:
    """The thread set back to the checkpoint the run asks for (the thread as it is when
    that is its latest, or none is asked for)."""
    seq = checkpoint_asked(data)
    if seq is None or (seq == view.checkpoint_seq and view.created is not None):
        return view
    if data.command is not None and data.command.resume is not None:
        raise ValidationException(
            "a run from a past checkpoint starts from its state with `input`; "
            "`command.resume` resumes the interrupt pending now"
        )
    restore = await restore_of(deps, tenant, view, seq)
    assert view.created is not None
    command = UpdateThreadState(
        agency_id=view.created.agency_id, thread_id=view.thread_id, restore=restore
    )
    written = await send_and_read(deps, tenant, "thread", view.thread_id, command)
    if written.event is None:
        raise ClientException(
            status_code=409,
            detail=f"a run of thread {view.thread_id} started first: it was not set back",
        )
    return await load_thread(deps, tenant, view.thread_id)
