"""Pure decisions on runtime commands: invoke, delay, approve, cancel, terminate, update."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from agency.contracts.codec import decode_event
from agency.contracts.commands import (
    ApproveToolCalls,
    CancelRun,
    DelayRun,
    InvokeThread,
    TerminateThread,
    UpdateThreadState,
)
from agency.contracts.errors import CommandRejected, ContractError
from agency.contracts.events import (
    AnyEvent,
    BlueprintSwitched,
    FileWritten,
    HitlResume,
    MessageAppended,
    RequestAccepted,
    RequestRejected,
    RunCanceled,
    RunDelayed,
    StateUpdated,
    ThreadTerminated,
    TodosWritten,
    ToolCall,
)
from agency.domain.run_cancel import canceled
from agency.domain.thread_state import ThreadState
from agency.services.tenancy import fairness
from agency.services.tenancy.door_limits import DoorLimits, messages_problem

# The commands decided on one thread's state.
ThreadCommand = (
    InvokeThread | DelayRun | ApproveToolCalls | CancelRun | TerminateThread | UpdateThreadState
)

# A request's fields, each an invoke's of the same name (the key comes from its envelope).
_ACCEPTED_FROM_COMMAND = tuple(
    f for f in RequestAccepted.__struct_fields__ if f != "idempotency_key"
)


def invoke(
    state: ThreadState,
    command: InvokeThread,
    key: str,
    *,
    active_runs: int = 0,
    parked_runs: int = 0,
    limits: fairness.FairnessLimits | None = None,
    door: DoorLimits | None = None,
    over_share: str | None = None,
) -> Sequence[AnyEvent]:
    """Accept the request; the loop starts it now, joins it to the active run, or starts it
    after that run (see `actions.injectable`). `active_runs` and `parked_runs` are the
    tenant's admitted runs at work and parked on someone, for its fairness `limits`; `door`
    bounds the request's messages; `over_share` says why the tenant is at its share of the
    runs in progress (`services/tenancy/admission.py`)."""
    if state.run_for_key(key) is not None:
        return ()  # the same key never starts a second run
    existing = state.run(command.run_id)
    if existing is not None and (not existing.delayed or existing.terminal):
        return ()  # nor does the same run id, sent again under another key (nor one withdrawn)
    if state.terminated:
        return (RequestRejected(run_id=command.run_id, idempotency_key=key, reason=refused(state)),)
    # --- per-tenant fairness: the one place it decides (services/tenancy/fairness.py) ---
    # A run inside an admitted tree (a subagent's, a report to its parent) is never
    # refused: its root holds the tenant's slot, and a refused child would strand it.
    in_tree = state.parent is not None or command.reported_by is not None
    # A request to a thread whose run is parked goes to that run (or ends it): it parks
    # nothing more.
    if state.active_run is not None and state.active_run.status == "paused":
        parked_runs = 0
    refusal = (
        fairness.refuse_invoke(active_runs, limits, parked_runs)
        if limits is not None and not in_tree
        else None
    )
    if refusal is None and not in_tree:
        refusal = over_share
    if refusal is None and door is not None and not in_tree:
        # Refused before it is accepted: an oversized request never joins the active run.
        refusal = messages_problem(command.messages, door)
    if refusal is not None:
        return (RequestRejected(run_id=command.run_id, idempotency_key=key, reason=refusal),)
    # -------------------------------------------------------------------------------------
    active = state.active_run
    exhausted = active is not None and active.status == "paused" and active.reason == "exhausted"
    if active is not None and command.strategy == "reject" and not exhausted:
        return (
            RequestRejected(
                run_id=command.run_id,
                idempotency_key=key,
                reason=f"run {active.run_id} is active and the request asked to be rejected",
            ),
        )
    switch = command.agent_type is not None and command.agent_type != state.agent_type
    # A run out of steps is continued by a request of its blueprint; one of another
    # blueprint cannot continue it, so it ends there (as a run past its step limit ends
    # elsewhere) and the request's run starts at once, as with `interrupt`.
    ends_exhausted = switch and exhausted
    # On a busy thread (`queue`, `after`) the switch waits for the request's run to start
    # (`actions.next_action`): the active run goes on as the blueprint it is.
    now = switch and (active is None or command.strategy == "interrupt" or ends_exhausted)
    switched = (
        (
            BlueprintSwitched(
                run_id=command.run_id,
                from_agent_type=state.agent_type,
                to_agent_type=command.agent_type or state.agent_type,
                reason="a run of this blueprint was asked for",
            ),
        )
        if now
        else ()
    )
    accepted = RequestAccepted(
        idempotency_key=key,
        **{f: getattr(command, f) for f in _ACCEPTED_FROM_COMMAND},
    )
    if active is not None and (command.strategy == "interrupt" or ends_exhausted):
        reason = (
            f"out of steps; a run of {command.agent_type!r} was asked for"
            if ends_exhausted and command.strategy != "interrupt"
            else "interrupted by a new request"
        )
        return (*canceled(state, active.run_id, reason), *switched, accepted)
    return (*switched, accepted)


def approve(
    state: ThreadState, command: ApproveToolCalls, key: str | None = None
) -> Sequence[AnyEvent]:
    """`key` is the command's idempotency key: a key already decided decides nothing."""
    if key is not None and key in state.command_keys:
        return ()
    run = state.active_run
    if command.run_id is not None and (run is None or run.run_id != command.run_id):
        return ()  # bound to a run that is over: nothing to approve any more
    if run is not None and run.at_breakpoint:
        return at_breakpoint(run.run_id, command)
    if run is None or run.status != "paused" or not run.hitl_pending:
        raise CommandRejected("not_awaiting_approval", "no run of this thread awaits approval")
    if command.modified_tool_calls:
        pending = {c.id for c in run.hitl_pending}
        unknown = [c.id for c in command.modified_tool_calls if c.id not in pending]
        if unknown:
            raise CommandRejected(
                "unknown_tool_call",
                f"modified tool calls {unknown} are not among the pending calls {sorted(pending)}",
            )
    return _resumed(run.run_id, command, command.approved, command.modified_tool_calls)


def _resumed(
    run_id: str,
    command: ApproveToolCalls,
    approved: bool,
    modified_tool_calls: tuple[ToolCall, ...] | None = None,
) -> tuple[AnyEvent, ...]:
    """What an approval appends: the files its update writes (before the calls it decides
    on run), then the run's resumption."""
    return (
        *(
            FileWritten(run_id=run_id, path=path, content=content, origin="attachment")
            for path, content in command.files.items()
        ),
        HitlResume(
            run_id=run_id,
            approved=approved,
            modified_tool_calls=modified_tool_calls,
            reason=command.reason,
            stream_modes=command.stream_modes,
            messages=command.messages,
        ),
    )


def delay(state: ThreadState, command: DelayRun) -> Sequence[AnyEvent]:
    """The run on the log as pending until its invoke is decided; nothing once it is there
    (or on a terminated thread, which its invoke refuses)."""
    if state.run(command.run_id) is not None or state.terminated:
        return ()
    return (RunDelayed(run_id=command.run_id, not_before=command.not_before),)


def at_breakpoint(run_id: str, command: ApproveToolCalls) -> tuple[AnyEvent, ...]:
    """An approval of a run paused at a breakpoint before its model call: it goes on. There
    are no calls to reject or edit there."""
    if not command.approved or command.modified_tool_calls:
        raise CommandRejected(
            "at_breakpoint",
            f"run {run_id} paused at a breakpoint before its model call, with no tool calls "
            "to reject or edit: approve it to go on, or cancel it",
        )
    return _resumed(run_id, command, approved=True)


def cancel(state: ThreadState, command: CancelRun, key: str | None = None) -> Sequence[AnyEvent]:
    """`key` is the command's idempotency key: a key already decided cancels nothing."""
    if key is not None and key in state.command_keys:
        return ()
    delayed = state.run(command.run_id) if command.run_id is not None else None
    if delayed is not None and delayed.delayed and not delayed.terminal:
        # A run asked for later is withdrawn before it was asked for: it never starts.
        reason = command.reason or "canceled by request"
        return (RunCanceled(run_id=delayed.run_id, reason=f"{WITHDRAWN}: {reason}"),)
    if command.run_id is not None and state.queued(command.run_id) is not None:
        # A queued request withdrawn: it neither starts nor joins the active run.
        reason = command.reason or "canceled by request"
        return (RunCanceled(run_id=command.run_id, reason=f"{WITHDRAWN}: {reason}"),)
    run = state.active_run
    if run is None:
        return ()  # nothing runs: cancel is a no-op, not an error
    if command.run_id is not None and command.run_id != run.run_id:
        return ()  # bound to a run that is over: the active one is another's
    return canceled(state, run.run_id, command.reason or "canceled by request")


TERMINATED = "terminated"
# The reason's prefix for a request canceled while queued, before it started or joined a run.
WITHDRAWN = "canceled while queued"


def canceled_thread(tenant_id: str, data: bytes) -> str | None:
    """The thread whose active run a `run.canceled` note (`tenant.<t>.note.run_canceled`,
    its body the event) ended, or None: not such an event of this tenant, or one that
    withdrew a queued request (no run of it was under way, so the thread's model call in
    flight, the active run's, goes on)."""
    try:
        envelope = decode_event(data)
    except (msgspec.DecodeError, msgspec.ValidationError, ContractError):
        return None
    payload = envelope.payload
    if envelope.tenant_id != tenant_id or not isinstance(payload, RunCanceled):
        return None
    return None if payload.reason.startswith(WITHDRAWN) else envelope.aggregate_id


def refused(state: ThreadState) -> str:
    """Why a terminated thread takes no request."""
    why = f" ({state.terminated_reason})" if state.terminated_reason else ""
    return f"thread {state.thread_id} is terminated{why}: it takes no new runs or messages"


def terminate(
    state: ThreadState, command: TerminateThread, key: str | None = None
) -> Sequence[AnyEvent]:
    """End the active run (`run.canceled`, reason `terminated`, its open calls answered) and
    every queued request, then mark the thread terminated. Once is enough: a terminated
    thread decides nothing."""
    if state.terminated or (key is not None and key in state.command_keys):
        return ()
    events: list[AnyEvent] = []
    active = state.active_run
    if active is not None:
        events.extend(canceled(state, active.run_id, TERMINATED))
    events.extend(
        RunCanceled(run_id=q.run_id, reason=TERMINATED)
        for q in state.queue
        if active is None or q.run_id != active.run_id
    )
    events.append(ThreadTerminated(reason=command.reason))
    return tuple(events)


def update_state(
    state: ThreadState, command: UpdateThreadState, key: str | None = None
) -> Sequence[AnyEvent]:
    """The messages, files and todos asked for, as events of no run; refused on a thread
    that runs (a run's steps decide on the state it holds) or is terminated."""
    if key is not None and key in state.command_keys:
        return ()
    if state.terminated:
        raise CommandRejected("terminated", refused(state))
    if state.active_run is not None:
        raise CommandRejected(
            "thread_busy",
            f"run {state.active_run.run_id} of thread {state.thread_id} is active: its state "
            "changes when it ends",
        )
    made_as: list[AnyEvent] = [StateUpdated(as_node=command.as_node)] if command.as_node else []
    restored: list[AnyEvent] = [command.restore] if command.restore is not None else []
    events: list[AnyEvent] = [
        *restored,
        *made_as,
        *(MessageAppended(message=m) for m in command.messages),
    ]
    events += [
        FileWritten(path=path, content=content, origin="attachment")
        for path, content in command.files.items()
    ]
    if command.todos is not None:
        events.append(TodosWritten(todos=command.todos))
    return events


def decide(
    state: ThreadState,
    payload: ThreadCommand,
    key: str,
    *,
    load: fairness.TenantLoad,
    limits: fairness.FairnessLimits,
    door: DoorLimits,
) -> Sequence[AnyEvent]:
    """The events a thread command (sent with idempotency `key`) decides on the thread's
    state (none: nothing to do); an invoke is weighed against its tenant's `load`, fairness
    `limits` and `door`."""
    match payload:
        case InvokeThread():
            return invoke(
                state,
                payload,
                key,
                active_runs=load.active(state.tenant_id),
                parked_runs=load.parked(state.tenant_id),
                limits=limits,
                door=door,
                over_share=load.over_share(state.tenant_id),
            )
        case DelayRun():
            return delay(state, payload)
        case ApproveToolCalls():
            return approve(state, payload, key)
        case CancelRun():
            return cancel(state, payload, key)
        case TerminateThread():
            return terminate(state, payload, key)
        case UpdateThreadState():
            return update_state(state, payload, key)
