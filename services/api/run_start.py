"""Starting a run: the invoke command sent onto the bus under the run's own trace, and the
run's status once the runtime took it up (bounded). Every surface that starts runs (the
API, LangGraph, AI SDK, AG-UI, A2A) starts them here.

A refusal for the tenant's limits or share binds no idempotency key: the client was told
to come back later, and it comes back with the same key. The runtime binds every key it
decided, so the key's next attempt (`<key>#<n>`, a run of its own) is sent instead, once
the wait finds the key's run refused for a limit by an earlier request."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

import msgspec
from litestar.exceptions import HTTPException, ValidationException
from opentelemetry import context as otel_context, trace

from agency.contracts.commands import DelayRun, InvokeThread
from agency.contracts.events import ChatMessage, ClientTool
from agency.contracts.events.thread import ConcurrencyStrategy
from agency.contracts.http import RunAccepted
from agency.domain.thread_state import ThreadState
from agency.services.api.budget_door import refuse_over_budget
from agency.services.api.deps import ApiDeps
from agency.services.api.idempotency import run_id_for
from agency.services.api.runstatus import (
    Feed,
    Refusal,
    RunStatuses,
    Seen,
    on_the_log,
    taken_up,
    wait_for_status,
)
from agency.services.tenancy.admission import ADMISSION_LIMIT
from agency.services.tenancy.door_limits import messages_problem
from agency.services.tenancy.fairness import ACTIVE_RUN_LIMIT, PARKED_RUN_LIMIT

_tracer = trace.get_tracer(__name__)
# The runtime's refusals of a run for its tenant's limits or share (`request.rejected`).
_LIMIT_REASONS = (ACTIVE_RUN_LIMIT, PARKED_RUN_LIMIT, ADMISSION_LIMIT)
_RETRY_IN = re.compile(r"retry in (\d+) s")
# A key's attempts past a refusal for a limit; past them the key is spent.
MAX_ATTEMPTS = 1_000


async def start_run(
    deps: ApiDeps,
    tenant: str,
    agency_id: str,
    thread_id: str,
    key: str,
    messages: tuple[ChatMessage, ...],
    files: dict[str, str],
    strategy: ConcurrencyStrategy,
    seen: Seen | None = None,
    feed: Feed | None = None,
    stream_modes: tuple[str, ...] = (),
    agent_type: str | None = None,
    webhook: str | None = None,
    pause_before_tools: bool = False,
    pause_before_model: bool = False,
    pause_after_tools: bool = False,
    client_tools: tuple[ClientTool, ...] = (),
    not_before: datetime | None = None,
    delete_thread_on_end: bool = False,
) -> RunAccepted:
    """Send the invoke and answer the run's status once the runtime took it up (bounded).
    The thread is the caller's and the limiter admitted the request. `seen`: the thread's
    runs as already read from its log, which the wait reads on from; `feed`: the thread's
    events from there on, which the caller follows on after the status. `not_before`: the
    invoke is decided then (the broker holds it), and the run is on the log as pending
    from now (`runtime.delay`): the answer is `queued` once it is."""
    if (problem := messages_problem(messages, deps.door)) is not None:
        raise ValidationException(problem)
    await refuse_over_budget(deps, tenant, agency_id)
    command = InvokeThread(
        agency_id=agency_id,
        thread_id=thread_id,
        run_id=run_id_for(tenant, thread_id, key),
        messages=messages,
        files=files,
        strategy=strategy,
        stream_modes=stream_modes,
        agent_type=agent_type,
        webhook=webhook,
        delete_thread_on_end=delete_thread_on_end,
        pause_before_tools=pause_before_tools,
        pause_before_model=pause_before_model,
        pause_after_tools=pause_after_tools,
        client_tools=client_tools,
        not_before=not_before,
    )
    started, refusal, sent, left = await _attempt(deps, tenant, key, command, seen, feed)
    if refusal is not None and for_a_limit(refusal.reason) and refusal.command_id != sent:
        # Refused for a limit before this request was sent: not this request's answer.
        key = _next_attempt(tenant, thread_id, key, left.runs if left else RunStatuses())
        command = msgspec.structs.replace(command, run_id=run_id_for(tenant, thread_id, key))
        started, _, _, _ = await _attempt(deps, tenant, key, command, left, feed)
    return started


async def _attempt(
    deps: ApiDeps,
    tenant: str,
    key: str,
    command: InvokeThread,
    seen: Seen | None,
    feed: Feed | None,
) -> tuple[RunAccepted, Refusal | None, str | None, Seen | None]:
    """Send the invoke under `key` and wait for its run's status: the answer, why the run
    was refused if it was, the id of the command sent (None if it was not stored: the
    broker had it already), and the thread's statuses as the wait left them."""
    thread_id, run_id, not_before = command.thread_id, command.run_id, command.not_before
    delay = (
        DelayRun(
            agency_id=command.agency_id, thread_id=thread_id, run_id=run_id, not_before=not_before
        )
        if not_before is not None
        else None
    )
    sent: str | None = None

    async def send() -> None:
        nonlocal sent
        result = await deps.bus.commands.send(tenant, command, idempotency_key=f"{thread_id}:{key}")
        sent = None if result.duplicate else result.command_id
        if delay is not None:
            await deps.bus.commands.send(tenant, delay, idempotency_key=f"{thread_id}:{key}:delay")

    # One root span per run: the run's work in every service continues its trace (the
    # command carries it). A span current here (an instrumented server's) is linked.
    current = trace.get_current_span().get_span_context()
    with _tracer.start_as_current_span(
        f"run {run_id}",
        context=otel_context.Context(),
        kind=trace.SpanKind.SERVER,
        links=[trace.Link(current)] if current.is_valid else None,
        attributes={"agency.tenant_id": tenant, "agency.thread_id": thread_id,
                    "agency.run_id": run_id},
    ):  # fmt: skip
        # The broker dedupes command ids per tenant, not per thread: the same key sent to
        # two threads is two requests, so the thread is part of the key on the bus. Sent
        # once the thread is watched (see `watch_log`).
        status, refusal, left = await wait_for_status(
            deps, tenant, thread_id, run_id, deps.settings.invoke_status_timeout,
            taken_up(run_id) if delay is None else on_the_log,
            send=send,
            seen=seen,
            feed=feed,
        )  # fmt: skip
    refused = refusal.reason if status == "rejected" and refusal is not None else None
    return RunAccepted(run_id=run_id, status=status, reason=refused), refusal, sent, left


def for_a_limit(reason: str | None) -> bool:
    """Whether a run was refused for its tenant's limits or share (`request.rejected`)."""
    return reason is not None and reason.startswith(_LIMIT_REASONS)


def current_attempt(
    tenant: str, thread_id: str, key: str, refused_for_a_limit: Callable[[str], bool]
) -> str:
    """The key itself, or its first attempt (`<key>#<n>`) whose run (by its id) was not
    refused for a limit (`MAX_ATTEMPTS` at most): the run a request under `key` is about."""
    attempt = key
    for n in range(1, MAX_ATTEMPTS + 1):
        if not refused_for_a_limit(run_id_for(tenant, thread_id, attempt)):
            return attempt
        attempt = f"{key}#{n}"
    return attempt


def attempt_on(state: ThreadState, key: str) -> str:
    """The attempt of `key` (`current_attempt`) a request under it is about, as the
    thread's log tells which of its runs were refused for a limit."""

    def refused_for_a_limit(run_id: str) -> bool:
        run = state.run(run_id)
        return run is not None and run.status == "error" and for_a_limit(run.error)

    return current_attempt(state.tenant_id, state.thread_id, key, refused_for_a_limit)


def _next_attempt(tenant: str, thread_id: str, key: str, runs: RunStatuses) -> str:
    def refused(run_id: str) -> bool:
        refusal = runs.refusals.get(run_id)
        return refusal is not None and for_a_limit(refusal.reason)

    return current_attempt(tenant, thread_id, key, refused)


def refuse_if_limited(started: RunAccepted) -> None:
    """429 with the runtime's reason when it refused the run for its tenant's limits or
    share (a door whose count lagged let it through), `Retry-After` the seconds the reason
    says (1 when it says none)."""
    reason = started.reason or ""
    if started.status == "rejected" and reason.startswith(_LIMIT_REASONS):
        said = _RETRY_IN.search(reason)
        retry_after = said.group(1) if said is not None else "1"
        raise HTTPException(status_code=429, detail=reason, headers={"Retry-After": retry_after})
