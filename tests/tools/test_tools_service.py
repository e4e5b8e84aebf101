"""The tools service against a real NATS: one result per call id, timeouts, retries, poison.

The durable consumer is shared by every test of the session, so a service may also meet
other tests' requests; tools record calls per tenant and assertions look at one tenant only.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from agency.contracts.codec import encode
from agency.contracts.envelope import Envelope, utc_now
from agency.contracts.events import (
    ChatMessage,
    MessageAppended,
    RunCanceled,
    ToolCall,
    ToolError,
    ToolOutput,
    ToolRequested,
    ToolStarted,
)
from agency.contracts.ids import new_id
from agency.contracts.limits import limits
from agency.contracts.subjects import EVENTS_STREAM, event_subject
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import TOOL_REQUESTS
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import Tool, ToolContext, ToolFailed, ToolRetryable, define_tool
from agency.services.tools import ToolsService, run_tools_service
from tests.deadletters import dead_letters_for
from tests.helpers import assert_eventually

Start = Callable[..., Awaitable[None]]
Calls = list[tuple[str, str, int]]  # (tenant, call id, attempt)


@pytest.fixture
async def start(bus: Bus) -> AsyncIterator[Start]:
    """Start a tools service for the test; it is stopped, within a bound, at the end."""
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def start(system: AgentSystem, **options: Any) -> None:
        service = ToolsService(
            bus,
            system,
            redelivery_backoff=(0.05,),
            tool_backoff=(0.01,),
            shutdown_grace=1.0,
            poll_interval=0.1,
            **options,
        )
        tasks.append(asyncio.create_task(service.run(stop)))

    yield start
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)


def recording(calls: Calls, fn: Callable[[dict[str, Any], ToolContext], Any]) -> Any:
    async def tool(args: dict[str, Any], ctx: ToolContext) -> Any:
        calls.append((ctx.tenant_id, ctx.call_id, ctx.attempt))
        return await fn(args, ctx)

    return tool


def system_of(*tools: Tool) -> AgentSystem:
    system = AgentSystem()
    for tool in tools:
        system.add_tool(tool, ["t"])
    return system


async def append(bus: Bus, tenant: str, thread: str, *payloads: Any) -> None:
    """Append after whatever the thread holds; the service may be writing to it too."""
    for _ in range(20):
        position = await bus.store.last_position(tenant, "thread", thread)
        try:
            await bus.store.append(tenant, "thread", thread, list(payloads), expected=position)
        except ConcurrencyError:
            continue
        return
    raise AssertionError(f"could not append to thread {thread}")


def requested(call_id: str, name: str, arguments: str = "{}", **options: Any) -> ToolRequested:
    return ToolRequested(
        run_id="run-1",
        step=1,
        call=ToolCall(id=call_id, name=name, arguments=arguments),
        **options,
    )


async def call_events(bus: Bus, tenant: str, thread: str, call_id: str) -> list[RecordedEvent]:
    events = await bus.store.read(tenant, "thread", thread)
    return [e for e in events if getattr(e.payload, "tool_call_id", None) == call_id]


async def result_of(bus: Bus, tenant: str, thread: str, call_id: str) -> ToolOutput | ToolError:
    """The call's one result, once there is one; fails on a second."""
    events = await call_events(bus, tenant, thread, call_id)
    results = [e.payload for e in events if isinstance(e.payload, ToolOutput | ToolError)]
    assert len(results) == 1, f"results of {call_id}: {results}"
    result = results[0]
    assert isinstance(result, ToolOutput | ToolError)
    return result


async def started_attempts(bus: Bus, tenant: str, thread: str, call_id: str) -> list[int]:
    events = await call_events(bus, tenant, thread, call_id)
    return [e.payload.attempt for e in events if isinstance(e.payload, ToolStarted)]


async def test_requested_call_is_started_and_answered_once(
    bus: Bus, tenant: str, start: Start
) -> None:
    """A sync tool's result becomes one tool.output, after one tool.started."""
    calls: Calls = []

    def echo(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        calls.append((ctx.tenant_id, ctx.call_id, ctx.attempt))
        return {"echo": args["text"], "thread": ctx.thread_id}

    await start(system_of(define_tool(echo, name="echo")))
    thread = new_id()
    await append(bus, tenant, thread, requested("c1", "echo", '{"text": "héllo"}'))

    result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
    assert isinstance(result, ToolOutput)
    assert result.output == f'{{"echo": "héllo", "thread": "{thread}"}}'
    assert (result.run_id, result.tool_name) == ("run-1", "echo")
    assert await started_attempts(bus, tenant, thread, "c1") == [1]
    assert [c for c in calls if c[0] == tenant] == [(tenant, "c1", 1)]
    events = await call_events(bus, tenant, thread, "c1")
    request_id = (await bus.store.read(tenant, "thread", thread))[0].envelope.event_id
    assert all(e.envelope.causation_id == request_id for e in events)
    assert events[-1].envelope.idempotency_key == "tool-result:c1"


async def test_request_delivered_three_times_yields_one_result(
    bus: Bus, tenant: str, start: Start
) -> None:
    calls: Calls = []

    async def slow_echo(args: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(0.05)
        return "done"

    await start(system_of(define_tool(recording(calls, slow_echo), name="slow_echo")))
    thread = new_id()
    # Three copies at once, then one more after the first has been answered.
    await append(bus, tenant, thread, *[requested("c1", "slow_echo")] * 3)
    await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
    await append(bus, tenant, thread, requested("c1", "slow_echo"), requested("c2", "slow_echo"))

    await assert_eventually(lambda: result_of(bus, tenant, thread, "c2"))
    result = await result_of(bus, tenant, thread, "c1")
    assert isinstance(result, ToolOutput) and result.output == "done"
    assert sorted(c[1] for c in calls if c[0] == tenant) == ["c1", "c2"]


async def test_call_answered_before_the_service_starts_is_not_run_again(
    bus: Bus, tenant: str, start: Start
) -> None:
    calls: Calls = []

    async def count(args: dict[str, Any], ctx: ToolContext) -> str:
        return "ran"

    thread = new_id()
    await append(bus, tenant, thread, requested("old", "count"))
    await bus.store.append(
        tenant,
        "thread",
        thread,
        [ToolOutput(run_id="run-1", tool_call_id="old", tool_name="count", output="earlier")],
        expected=await bus.store.last_position(tenant, "thread", thread),
        idempotency_key="tool-result:old",
    )
    await append(bus, tenant, thread, requested("new", "count"))
    # One call at a time: "new" is answered only after "old" has been looked at.
    await start(system_of(define_tool(recording(calls, count), name="count")), concurrency=1)

    await assert_eventually(lambda: result_of(bus, tenant, thread, "new"))
    old = await result_of(bus, tenant, thread, "old")
    assert isinstance(old, ToolOutput) and old.output == "earlier"
    assert await started_attempts(bus, tenant, thread, "old") == []
    assert [c[1] for c in calls if c[0] == tenant] == ["new"]


async def test_tool_exceeding_its_timeout_is_retried_then_fails(
    bus: Bus, tenant: str, start: Start
) -> None:
    calls: Calls = []

    async def hang(args: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(30)
        return "never"

    tool = define_tool(recording(calls, hang), name="hang", timeout=0.2, max_attempts=2)
    await start(system_of(tool))
    thread = new_id()
    begun = time.monotonic()
    await append(bus, tenant, thread, requested("c1", "hang", max_attempts=5))

    result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
    assert isinstance(result, ToolError)
    assert (
        result.error == "TimeoutError: tool 'hang' timed out after 0.2 s (gave up after 2 attempts)"
    )
    assert result.attempts == 2
    assert await started_attempts(bus, tenant, thread, "c1") == [1, 2]
    assert [c[2] for c in calls if c[0] == tenant] == [1, 2]
    assert time.monotonic() - begun < 5


async def test_request_timeout_is_stricter_than_the_tools(
    bus: Bus, tenant: str, start: Start
) -> None:
    async def hang(args: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(30)
        return "never"

    await start(system_of(define_tool(hang, name="hang")))
    thread = new_id()
    await append(bus, tenant, thread, requested("c1", "hang", timeout_ms=100, max_attempts=1))

    result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
    assert isinstance(result, ToolError) and "timed out after 0.1 s" in result.error
    assert result.attempts == 1


async def test_retryable_failures_then_success_give_one_output(
    bus: Bus, tenant: str, start: Start
) -> None:
    calls: Calls = []

    async def flaky(args: dict[str, Any], ctx: ToolContext) -> dict[str, bool]:
        if ctx.attempt < 3:
            raise ToolRetryable("busy, try again")
        return {"ok": True}

    await start(system_of(define_tool(recording(calls, flaky), name="flaky", max_attempts=3)))
    thread = new_id()
    await append(bus, tenant, thread, requested("c1", "flaky"))

    result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
    assert isinstance(result, ToolOutput) and result.output == '{"ok": true}'
    assert await started_attempts(bus, tenant, thread, "c1") == [1, 2, 3]
    assert [c[2] for c in calls if c[0] == tenant] == [1, 2, 3]


async def test_failing_tool_answers_with_its_error_and_the_service_goes_on(
    bus: Bus, tenant: str, start: Start
) -> None:
    calls: Calls = []

    async def boom(args: dict[str, Any], ctx: ToolContext) -> str:
        raise ValueError(f"no weather for {args['city']}")

    async def refuse(args: dict[str, Any], ctx: ToolContext) -> str:
        raise ToolFailed("permission denied for this folder")

    async def ping(args: dict[str, Any], ctx: ToolContext) -> str:
        return "pong"

    system = system_of(
        define_tool(recording(calls, boom), name="boom"),
        define_tool(recording(calls, refuse), name="refuse"),
        define_tool(ping, name="ping"),
    )
    await start(system)
    thread = new_id()
    await append(bus, tenant, thread, requested("c1", "boom", '{"city": "Oslo"}'))
    await append(bus, tenant, thread, requested("c2", "refuse"), requested("c3", "ping"))

    boom_result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
    assert isinstance(boom_result, ToolError)
    assert (boom_result.error, boom_result.attempts) == ("ValueError: no weather for Oslo", 1)
    refused = await assert_eventually(lambda: result_of(bus, tenant, thread, "c2"))
    assert isinstance(refused, ToolError) and refused.error == "permission denied for this folder"
    pong = await assert_eventually(lambda: result_of(bus, tenant, thread, "c3"))
    assert isinstance(pong, ToolOutput) and pong.output == "pong"
    # Not transient: no second attempt.
    assert sorted(c[1:] for c in calls if c[0] == tenant) == [("c1", 1), ("c2", 1)]


def divide(args: dict[str, Any], ctx: ToolContext) -> float:
    return float(args["a"]) / args["b"]


# Where `divide` raises, as a tool.error's raised_at names it (run from the project's folder).
DIVIDE_LINE = f"{os.path.relpath(__file__)}, line {divide.__code__.co_firstlineno + 1}"


async def test_a_raising_tool_is_logged_with_its_traceback_and_its_error_names_its_line(
    bus: Bus, tenant: str, start: Start
) -> None:
    """The model reads `ExcType: message` only; the log has the traceback and the call's
    ids, and the tool.error's `raised_at` the line of the tool that raised."""
    await start(system_of(define_tool(divide, name="divide")))
    thread = new_id()
    with capture_logs() as logs:
        await append(bus, tenant, thread, requested("c1", "divide", '{"a": 1, "b": 0}'))
        result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
    assert isinstance(result, ToolError)
    assert result.error == "ZeroDivisionError: float division by zero"
    assert result.raised_at == f"{DIVIDE_LINE}, in divide"
    (logged,) = [e for e in logs if e["event"] == "tool raised" and e["tenant_id"] == tenant]
    assert {k: logged[k] for k in ("thread_id", "run_id", "call_id", "tool", "raised_at")} == {
        "thread_id": thread,
        "run_id": "run-1",
        "call_id": "c1",
        "tool": "divide",
        "raised_at": result.raised_at,
    }
    assert logged["log_level"] == "warning"
    assert isinstance(logged["exc_info"], ZeroDivisionError)
    assert logged["exc_info"].__traceback__ is not None


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("nope", "{}", "unknown tool 'nope'"),
        ("ping", "{not json", "invalid arguments for tool 'ping': arguments are not valid JSON"),
        (
            "ping",
            "[1, 2]",
            "invalid arguments for tool 'ping': arguments must be a JSON object, not an array",
        ),
    ],
    ids=["unknown-tool", "invalid-json", "not-an-object"],
)
async def test_request_that_cannot_run_is_answered_with_an_error(
    bus: Bus, tenant: str, start: Start, name: str, arguments: str, error: str
) -> None:
    calls: Calls = []

    async def ping(args: dict[str, Any], ctx: ToolContext) -> str:
        return "pong"

    await start(system_of(define_tool(recording(calls, ping), name="ping")))
    thread = new_id()
    await append(bus, tenant, thread, requested("c1", name, arguments))

    result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
    assert isinstance(result, ToolError) and result.error.startswith(error)
    assert result.attempts == 0
    assert await started_attempts(bus, tenant, thread, "c1") == []
    assert [c for c in calls if c[0] == tenant] == []


async def test_garbage_on_the_request_subject_is_dead_lettered_and_service_continues(
    bus: Bus, tenant: str, start: Start
) -> None:
    async def ping(args: dict[str, Any], ctx: ToolContext) -> str:
        return "pong"

    await start(system_of(define_tool(ping, name="ping")))
    # The garbage goes to a thread of its own: the event store cannot append after an event it
    # cannot decode (it skips it when reading the thread's position).
    poisoned, thread = new_id(), new_id()
    await bus.js.publish(event_subject(tenant, "thread", poisoned), b"{garbage")
    await append(bus, tenant, thread, requested("c1", "ping"))

    result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
    assert isinstance(result, ToolOutput) and result.output == "pong"

    async def dead_lettered() -> list[tuple[str, str, bytes]]:
        letters = await dead_letters_for(bus, tenant)
        assert len(letters) == 1
        return letters

    [(reason, detail, data)] = await assert_eventually(dead_lettered)
    assert reason == "undecodable" and "cannot decode" in detail
    assert data == b"{garbage"


async def test_request_naming_another_tenant_than_its_subject_is_refused(
    bus: Bus, tenant: str, start: Start
) -> None:
    """The envelope cannot steer the service into another tenant's thread."""
    calls: Calls = []

    async def ping(args: dict[str, Any], ctx: ToolContext) -> str:
        return "pong"

    await start(system_of(define_tool(recording(calls, ping), name="ping")))
    victim = "t" + new_id().lower()
    thread = new_id()
    forged = Envelope(
        event_id=new_id(),
        tenant_id=victim,
        aggregate="thread",
        aggregate_id=thread,
        seq=1,
        ts=utc_now(),
        type="tool.requested",
        version=1,
        payload=requested("c1", "ping"),
    )
    await bus.js.publish(event_subject(tenant, "thread", thread), encode(forged))

    async def dead_lettered() -> list[tuple[str, str, bytes]]:
        letters = await dead_letters_for(bus, tenant)
        assert len(letters) == 1
        return letters

    [(reason, detail, _)] = await assert_eventually(dead_lettered)
    assert reason == "undecodable" and "does not match its subject" in detail
    assert await bus.store.read(victim, "thread", thread) == []
    assert [c for c in calls if c[0] in (tenant, victim)] == []


class _BrokenLookup(AgentSystem):
    """A system whose tool lookup fails: a failure of the service, not of a tool."""

    def external_tool(self, name: str) -> Tool | None:
        if name == "explode":
            raise RuntimeError("tool registry unavailable")
        return super().external_tool(name)


async def test_service_failure_is_retried_then_dead_lettered_and_answered(
    bus: Bus, tenant: str, start: Start
) -> None:
    async def ping(args: dict[str, Any], ctx: ToolContext) -> str:
        return "pong"

    system = _BrokenLookup().add_tool(define_tool(ping, name="ping"), ["t"])
    await start(system)
    thread = new_id()
    await append(bus, tenant, thread, requested("c1", "explode"), requested("c2", "ping"))

    pong = await assert_eventually(lambda: result_of(bus, tenant, thread, "c2"))
    assert isinstance(pong, ToolOutput)

    async def dead_lettered() -> list[tuple[str, str, bytes]]:
        letters = await dead_letters_for(bus, tenant)
        assert len(letters) == 1
        return letters

    [(reason, detail, _)] = await assert_eventually(dead_lettered)
    assert (reason, detail) == ("exhausted", "RuntimeError: tool registry unavailable")
    failed = await result_of(bus, tenant, thread, "c1")
    assert isinstance(failed, ToolError)
    assert failed.error == (
        "the tools service could not run this call (RuntimeError: tool registry unavailable)"
    )


async def test_call_interrupted_by_a_stop_is_resumed_by_the_next_service(
    bus: Bus, tenant: str, start: Start
) -> None:
    """Cancelled at shutdown, the request goes back to the broker; the attempt count goes on."""
    calls: Calls = []

    async def slow_first(args: dict[str, Any], ctx: ToolContext) -> str:
        if ctx.attempt == 1:
            await asyncio.sleep(30)
        return f"done on attempt {ctx.attempt}"

    system = system_of(define_tool(recording(calls, slow_first), name="slow_first"))
    first_stop = asyncio.Event()
    first = asyncio.create_task(
        ToolsService(bus, system, shutdown_grace=0.1, poll_interval=0.1).run(first_stop)
    )
    thread = new_id()

    async def running() -> None:
        assert await started_attempts(bus, tenant, thread, "c1") == [1]

    try:
        await append(bus, tenant, thread, requested("c1", "slow_first"))
        await assert_eventually(running)
    finally:
        first_stop.set()
        await asyncio.wait_for(first, timeout=5)
    await start(system)

    result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
    assert isinstance(result, ToolOutput) and result.output == "done on attempt 2"
    assert await started_attempts(bus, tenant, thread, "c1") == [1, 2]
    assert [c[2] for c in calls if c[0] == tenant] == [1, 2]


async def test_run_tools_service_owns_its_connection(bus: Bus, tenant: str, nats_url: str) -> None:
    async def ping(args: dict[str, Any], ctx: ToolContext) -> str:
        return "pong"

    stop = asyncio.Event()
    task = asyncio.create_task(
        run_tools_service(
            nats_url, "postgresql://unused", stop, system_of(define_tool(ping, name="ping"))
        )
    )
    thread = new_id()
    try:
        await append(bus, tenant, thread, requested("c1", "ping"))
        result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"))
        assert isinstance(result, ToolOutput) and result.output == "pong"
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


async def test_an_output_larger_than_the_limit_is_cut_with_a_marker(
    bus: Bus, tenant: str, start: Start
) -> None:
    """3 MB would not fit in an event: the model gets the head and how much was left out."""

    def huge(args: dict[str, Any], ctx: ToolContext) -> str:
        return "x" * 3_000_000

    await start(system_of(define_tool(huge, name="huge")))
    thread = new_id()
    await append(bus, tenant, thread, requested("c1", "huge"))

    result = await assert_eventually(lambda: result_of(bus, tenant, thread, "c1"), timeout=15)
    assert isinstance(result, ToolOutput)
    assert len(result.output.encode()) <= limits().max_tool_output_bytes
    omitted = 3_000_000 - result.output.index("…")
    assert result.output.endswith(f"… [truncated: {omitted} bytes omitted]")


def canceled_run(call_id: str, *, answered: bool) -> list[Any]:
    """What the runtime appends when it cancels run-1 (answering the open call, or not)."""
    answer = MessageAppended(
        run_id="run-1",
        message=ChatMessage(role="tool", content="Not run: canceled.", tool_call_id=call_id),
    )
    return [*([answer] if answered else []), RunCanceled(run_id="run-1", reason="canceled")]


@pytest.mark.parametrize("answered", [True, False], ids=["runtime-answered", "unanswered"])
async def test_a_call_of_a_canceled_run_is_not_run(
    bus: Bus, tenant: str, start: Start, answered: bool
) -> None:
    calls: Calls = []

    async def never(args: dict[str, Any], ctx: ToolContext) -> str:
        return "ran"

    await start(system_of(define_tool(recording(calls, never), name="never")))
    thread = new_id()
    await append(
        bus, tenant, thread, requested("c1", "never"), *canceled_run("c1", answered=answered)
    )

    async def settled() -> list[str]:
        info = await bus.js.consumer_info(EVENTS_STREAM, TOOL_REQUESTS.name)
        assert info.num_ack_pending == 0 and info.num_pending == 0
        return [e.type for e in await bus.store.read(tenant, "thread", thread)]

    types = await assert_eventually(settled, timeout=10)
    if answered:
        assert types == ["tool.requested", "message.appended", "run.canceled"]
    else:
        result = await result_of(bus, tenant, thread, "c1")
        assert (
            isinstance(result, ToolError)
            and "Not run: run run-1 ended (run.canceled)" in result.error
        )
    assert [c for c in calls if c[0] == tenant] == []


async def test_a_running_call_is_stopped_by_the_cancel_of_its_run_and_never_answered(
    bus: Bus, tenant: str, start: Start
) -> None:
    stopped = asyncio.Event()
    running = asyncio.Event()

    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        running.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "too late"

    await start(system_of(define_tool(slow, name="slow", timeout=60)))
    thread = new_id()
    await append(bus, tenant, thread, requested("c1", "slow"))
    await asyncio.wait_for(running.wait(), timeout=10)
    await append(bus, tenant, thread, *canceled_run("c1", answered=True))
    await asyncio.wait_for(stopped.wait(), timeout=10)

    async def acked() -> None:
        info = await bus.js.consumer_info(EVENTS_STREAM, TOOL_REQUESTS.name)
        assert info.num_ack_pending == 0

    await assert_eventually(acked, timeout=10)
    types = [e.type for e in await bus.store.read(tenant, "thread", thread)]
    assert "tool.output" not in types and "tool.error" not in types
    assert [t for t in types if t != "checkpoint.saved"][-1] == "run.canceled"
