"""Starting a LangGraph run: an invoke of the thread (`multitask_strategy` → our strategy;
`after_seconds`: decided then, pending on the log until; from a past `checkpoint_id`: the
thread set back there first, `branch`), or, with `command: {resume}` (its `update` and
`goto`, `command`), an approval of the calls its paused run awaits, which names the stretch
of that run that follows (`<run id>~<seq>`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from litestar.exceptions import ClientException, NotFoundException, ValidationException

from agency.contracts.ids import new_id
from agency.domain.thread_parts import RunView
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.approval import Approval
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.branch import branched
from agency.services.api.langgraph.command import (
    SKIPPED,
    Goto,
    approval_of_sends,
    goto_of,
    update_with_resume,
    with_update_as_input,
)
from agency.services.api.langgraph.follow import following
from agency.services.api.langgraph.graphstate import GraphView, RunRef
from agency.services.api.langgraph.inputs import (
    Invocation,
    approval,
    breakpoints,
    invocation,
    not_before,
    refuse_unmapped,
    strategy_of,
)
from agency.services.api.langgraph.parts import stream_modes
from agency.services.api.langgraph.scope import (
    agency_for,
    agent_type_named,
    awaiting_view,
    load_thread,
    new_thread,
    thread_id_of,
)
from agency.services.api.langgraph.webhook import webhook_of
from agency.services.api.langgraph.wire import Connection, RunCreate
from agency.services.api.run_start import refuse_if_limited, start_run
from agency.services.api.runstatus import Seen, sent_and_seen
from agency.services.api.streaming import ThreadFeed, closing_event


@dataclass(frozen=True, slots=True)
class Begun:
    """A run started: the thread as it was before the run's stretch, the stretch, and (when
    asked for) the thread's events from `view` on, followed since before the command went."""

    view: GraphView
    ref: RunRef
    feed: ThreadFeed | None = None


async def begin_run(
    deps: ApiDeps,
    tenant: str,
    thread_id: str,
    data: RunCreate,
    request: Connection,
    *,
    follow: bool = False,
) -> Begun:
    """Start the run the request asks for. A thread created without an assistant is
    created now, of the run's assistant. `follow`: the caller follows the run on from the
    feed it is given, which read its events as the log stored them, the status included."""
    refuse_unmapped(data)
    due = not_before(data)
    goto = goto_of(data)
    webhook = webhook_of(data.webhook)
    try:
        view = await load_thread(deps, tenant, thread_id, deferred=True)
    except NotFoundException:
        if data.if_not_exists != "create":
            raise
        view = awaiting_view(tenant, thread_id_of(thread_id))
    if goto is not None and data.command is not None and not awaits_approval(view):
        if goto.node == "tools":
            raise ClientException(
                status_code=409,
                detail=f"no tool calls of thread {view.thread_id} wait for the 'tools' node: "
                "command.goto 'tools' runs the calls a run paused before",
            )
        # To the model: a run (its update the input), as any run asks the model.
        goto, data = (
            None,
            msgspec.structs.replace(data, command=msgspec.structs.replace(data.command, goto=None)),
        )
    data = with_update_as_input(data)
    invocation(data.input)  # refused before the thread exists, or is set back
    view = await branched(deps, tenant, view, data)
    if view.created is None:
        if data.command is not None:
            raise ClientException(
                status_code=409, detail=f"thread {view.thread_id} has no interrupt to resume"
            )
        agency_id = await agency_for(deps, tenant, request)
        agent_type = await agent_type_named(deps, tenant, agency_id, data.assistant_id)
        view = await new_thread(deps, tenant, agency_id, agent_type, {}, view.thread_id)
    assert view.created is not None
    switch_to: str | None = None
    resuming = data.command is not None or (data.input is None and awaits_approval(view))
    if data.assistant_id != view.state.agent_type:
        if resuming:
            raise ClientException(
                status_code=409,
                detail=f"the interrupt of thread {view.thread_id} is assistant "
                f"{view.state.agent_type!r}'s to resume, not {data.assistant_id[:80]!r}'s",
            )
        # Another assistant's run: the thread switches to its blueprint, history kept.
        named = await agent_type_named(deps, tenant, view.created.agency_id, data.assistant_id)
        switch_to = named if named != view.state.agent_type else None
    # Holds nothing until read: only the invoke's wait below opens it.
    feed = following(deps, view, closing_event(request.app.state)) if follow else None
    if data.command is not None and (data.command.resume is not None or goto is not None):
        if data.input:
            raise ValidationException("send `input` or `command.resume`, not both")
        modes = stream_modes(data.stream_mode)
        update = update_with_resume(data)
        resumed = await resume_run(
            deps, tenant, view, data.command.resume, modes, update=update, goto=goto, feed=feed
        )
        return Begun(view, resumed, feed)
    if data.input is None and data.command is None and awaits_approval(view):
        # LangGraph resumes a static breakpoint with a run without input: it goes on (the
        # calls it paused before approved).
        return Begun(view, await resume_breakpoint(deps, tenant, view, data, feed), feed)
    await deps.limiter.admit(deps.pool, tenant, view.thread_id)
    asked = invocation(data.input)
    idle = view.state.active_run is None
    messages = asked.answering(view.state.open_tool_calls() if idle else ())
    stops = breakpoints(data)
    strategy = strategy_of(data)
    if awaits_approval(view):
        # LangGraph runs new input on an interrupted thread: the approval it awaits is
        # withdrawn (its run canceled, its calls answered "Not run") and the input runs.
        strategy = "interrupt"
    try:
        started = await start_run(
            deps,
            tenant,
            view.created.agency_id,
            view.thread_id,
            new_id(),
            messages,
            asked.files,
            strategy,
            Seen(view.runs, view.position),
            feed,
            stream_modes(data.stream_mode),
            # The run's own blueprint, always: queued behind a run of another (`enqueue`),
            # it runs as this one when it starts.
            switch_to or view.state.agent_type,
            webhook=webhook,
            delete_thread_on_end=data.on_completion == "delete",
            pause_before_tools=stops.pause_before_tools,
            pause_before_model=stops.pause_before_model,
            pause_after_tools=stops.pause_after_tools,
            client_tools=asked.tools,
            not_before=due,
        )
        refuse_if_limited(started)
        if started.status == "rejected":
            raise ClientException(
                status_code=409, detail=_rejected(view, data, switch_to, started.reason)
            )
    except BaseException:
        if feed is not None:
            await feed.aclose()
        raise
    return Begun(view, RunRef(started.run_id), feed)


def _rejected(view: GraphView, data: RunCreate, switch_to: str | None, reason: str | None) -> str:
    if switch_to is not None:
        return (
            f"thread {view.thread_id} is busy with assistant {view.state.agent_type!r}: a run "
            f"of {switch_to!r} waits for it with multitask_strategy 'enqueue', or starts "
            "now with 'interrupt'"
        )
    return (
        f"thread {view.thread_id} is busy and multitask_strategy is "
        f"{data.multitask_strategy or 'reject'!r}: the run was rejected ({reason})"
    )


def awaits_approval(view: GraphView) -> bool:
    """The thread is interrupted: its run awaits a decision on tool calls, or waits at a
    breakpoint before a model call."""
    run = view.state.active_run
    return (
        run is not None and run.status == "paused" and (bool(run.hitl_pending) or run.at_breakpoint)
    )


async def resume_breakpoint(
    deps: ApiDeps, tenant: str, view: GraphView, data: RunCreate, feed: ThreadFeed | None = None
) -> RunRef:
    """A run without input on a thread paused at a static breakpoint: before tool calls (a
    run started with `interrupt_before=["tools"]` or `interrupt_after=["model"]`), the calls
    it awaits are approved; before a model call, the run goes on. A pause the blueprint's
    `hitl.tools` made awaits a decision: no input is none."""
    run = view.state.active_run
    assert run is not None
    if not run.pause_before_tools and not run.at_breakpoint:
        raise ClientException(
            status_code=409,
            detail=f"thread {view.thread_id} awaits a decision on the tool calls its "
            "blueprint's hitl.tools hold: resume it with command={'resume': ...}",
        )
    return await resume_run(deps, tenant, view, True, stream_modes(data.stream_mode), feed=feed)


async def resume_run(
    deps: ApiDeps,
    tenant: str,
    view: GraphView,
    resume: Any,
    modes: tuple[str, ...] = (),
    *,
    update: Invocation | None = None,
    goto: Goto | None = None,
    feed: ThreadFeed | None = None,
) -> RunRef:
    """The decision a resume stands for, with the update it carries (`command.update`)
    and where it goes on (`command.goto`). `feed`: the thread's events after `view`, which
    the caller follows the run on from."""
    run = view.state.active_run
    if run is None or not awaits_approval(view):
        raise ClientException(
            status_code=409, detail=f"thread {view.thread_id} has no interrupt to resume"
        )
    decided = _decided(view, run, resume, goto)
    assert view.created is not None
    command = msgspec.structs.replace(
        decided.command(view.created.agency_id, view.thread_id, run.run_id),
        stream_modes=modes,
        messages=update.messages if update is not None else (),
        files=update.files if update is not None else {},
    )
    key = new_id()

    def recorded(events: list[RecordedEvent]) -> RecordedEvent | None:
        return next((e for e in events if e.envelope.idempotency_key == key), None)

    async def send() -> None:
        await deps.bus.commands.send(tenant, command, idempotency_key=key)

    # Answered once the runtime recorded the resume (bounded): a client joining the stretch
    # right after finds it, in the modes it was asked in.
    await sent_and_seen(
        deps, tenant, view.thread_id, recorded, deps.settings.read_your_writes_timeout,
        send=send, feed=feed, position=view.position,
    )  # fmt: skip
    # The stretch after the pause: the id `runs.list` names it by once it began.
    pauses = view.pauses.get(run.run_id)
    return RunRef(run.run_id, pauses[-1] if pauses else view.last_seq)


def _decided(view: GraphView, run: RunView, resume: Any, goto: Goto | None) -> Approval:
    """The approval a resume stands for. At a breakpoint before a model call there is no
    interrupt to take the value (as in LangGraph): the run goes on, whatever it is. Before
    tool calls, `goto` 'tools' runs them and 'model' skips them (rejected), and a value
    given with it must say the same."""
    if run.at_breakpoint:
        if goto is not None and goto.node == "tools":
            raise ClientException(
                status_code=409,
                detail=f"run {run.run_id} waits before a model call, with no tool calls for "
                "the 'tools' node: command.goto 'model' goes on",
            )
        return Approval(True, None, "")
    to_tools = goto is None or goto.node == "tools"
    interrupt_id = view.interrupt_ids.get(run.run_id, run.run_id)
    if isinstance(resume, dict) and interrupt_id in resume:
        resume = resume[interrupt_id]  # the value keyed by the interrupt it answers
    if goto is not None and goto.sent is not None:
        return approval_of_sends(goto.sent, run.hitl_pending, resume, interrupt_id)
    if resume is None and goto is not None:
        return Approval(to_tools, None, "" if to_tools else SKIPPED)
    decided = approval(resume, run.hitl_pending, interrupt_id)
    if goto is not None and decided.approved != to_tools:
        said = "approves" if decided.approved else "rejects"
        raise ValidationException(
            f"command.goto {goto.node!r} and a resume that {said} the pending tool calls "
            "contradict each other: 'tools' runs them, 'model' skips them"
        )
    return decided
