"""The consumer loop every worker shares: dead-letter hook, retries, and a broker that goes away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import nats.errors
import nats.js.errors
import pytest
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from agency.contracts.codec import encode
from agency.contracts.commands import CancelRun, CommandEnvelope, CreateAgency
from agency.contracts.envelope import utc_now
from agency.contracts.events import MessageAppended, RunStarted, ThreadCreated
from agency.contracts.events.base import ChatMessage
from agency.contracts.ids import new_id
from agency.contracts.subjects import (
    COMMANDS_STREAM,
    DEAD_LETTER_STREAM,
    EVENT_TYPE_HEADER,
    EVENTS_STREAM,
    command_subject,
    event_subject,
)
from agency.infra.jetstream import eventworker
from agency.infra.jetstream.commandbus import CommandWorker, Delivery
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import DurableSpec
from agency.infra.jetstream.dlq_admin import LetterInfo
from agency.infra.jetstream.errors import is_transient
from agency.infra.jetstream.eventworker import EventWorker, PermanentFailure
from agency.infra.jetstream.pullfeed import PullFeed
from agency.infra.jetstream.records import Position, RecordedEvent, UndecodableEvent
from agency.infra.jetstream.streams import StreamSettings, provision
from agency.infra.jetstream.worker_tuning import WorkerRetry
from agency.infra.launch import NatsCluster, NatsServer
from agency.infra.outage import REGISTRY as OUTAGES, OutageWait
from agency.infra.retry import RetryPolicy
from tests.deadletters import dead_letters, dead_letters_for
from tests.helpers import assert_eventually

FAST = RetryPolicy(attempts=3, timeout=5.0, wait_initial=0.01, wait_max=0.05, wait_jitter=0.0)
FAST_RETRY = WorkerRetry(
    settle=FAST,
    hook=FAST,
    outage=OutageWait(max_wait=5.0, wait_initial=0.01, wait_max=0.05),
    subscribe=RetryPolicy(attempts=3, timeout=5.0, wait_initial=0.05, wait_max=0.2),
)

Hook = Callable[[RecordedEvent, str, str], Awaitable[None]]
Handler = Callable[[RecordedEvent], Awaitable[None]]


async def new_events_consumer(bus: Bus, spec: DurableSpec) -> None:
    """The durable, created to deliver only what is written from now on: the test's own."""
    config = spec.config()
    config.deliver_policy = DeliverPolicy.NEW
    await bus.js.add_consumer(EVENTS_STREAM, config=config)


@pytest.fixture
async def run_event_worker(
    bus: Bus, tenant: str
) -> AsyncIterator[Callable[[Handler, Hook | None], Awaitable[None]]]:
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    spec = DurableSpec("test-" + tenant, ("thread.created",))

    async def start(handler: Handler, hook: Hook | None) -> None:
        await new_events_consumer(bus, spec)

        async def mine(event: RecordedEvent) -> None:
            if event.envelope.tenant_id == tenant:
                await handler(event)

        worker = EventWorker(bus, spec, mine, max_deliver=2, on_dead_letter=hook, retry=FAST_RETRY)
        tasks.append(asyncio.create_task(worker.run(stop)))

    yield start
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    await bus.js.delete_consumer(EVENTS_STREAM, spec.name)


async def create_thread(bus: Bus, tenant: str) -> str:
    thread = new_id()
    created = ThreadCreated(agency_id="a1", agent_type="helper")
    await bus.store.append(tenant, "thread", thread, [created], expected=Position())
    return thread


async def test_a_worker_acks_the_types_it_does_not_want_by_their_header_without_decoding(
    bus: Bus, tenant: str, run_event_worker: Callable[[Handler, Hook | None], Awaitable[None]]
) -> None:
    handled: list[tuple[str, str]] = []

    async def handler(event: RecordedEvent) -> None:
        handled.append((event.envelope.aggregate_id, event.type))

    await run_event_worker(handler, None)
    first = await create_thread(bus, tenant)
    _, position = await bus.store.read_positioned(tenant, "thread", first)
    started = RunStarted(run_id="r1", agent_type="helper", max_steps=5)
    hello = MessageAppended(message=ChatMessage(role="user", content="hi"))
    await bus.store.append(tenant, "thread", first, [started, hello], expected=position)
    # Not decodable, but its header names a type the worker does not want: passed over.
    await bus.js.publish(
        event_subject(tenant, "thread", first), b"{no", headers={EVENT_TYPE_HEADER: "run.tick"}
    )
    second = await create_thread(bus, tenant)

    async def both_created() -> None:
        assert handled == [(first, "thread.created"), (second, "thread.created")]
        info = await bus.js.consumer_info(EVENTS_STREAM, "test-" + tenant)
        assert (info.num_pending, info.num_ack_pending) == (0, 0)

    await assert_eventually(both_created, timeout=20)
    assert await dead_letters_for(bus, tenant) == []


async def test_on_dead_letter_runs_before_an_exhausted_event_is_dead_lettered(
    bus: Bus, tenant: str, run_event_worker: Callable[[Handler, Hook | None], Awaitable[None]]
) -> None:
    calls: list[tuple[str, str, str, int]] = []

    async def handler(event: RecordedEvent) -> None:
        raise RuntimeError("model unreachable")

    async def hook(event: RecordedEvent, reason: str, detail: str) -> None:
        # Where the dead-letter stream stands while the hook runs.
        info = await bus.js.stream_info(DEAD_LETTER_STREAM)
        calls.append((event.envelope.aggregate_id, reason, detail, info.state.last_seq))
        if len(calls) == 1:
            raise ConnectionError("store away")  # the hook's own failure is retried

    await run_event_worker(handler, hook)
    thread = await create_thread(bus, tenant)

    async def dead_lettered() -> list[LetterInfo]:
        letters = await dead_letters(bus, tenant)
        assert letters
        return letters

    letters = await assert_eventually(dead_lettered, timeout=30)
    assert [(letter.reason, letter.detail) for letter in letters] == [
        ("exhausted", "RuntimeError: model unreachable")
    ]
    assert [c[:3] for c in calls] == [
        (thread, "exhausted", "RuntimeError: model unreachable"),
        (thread, "exhausted", "RuntimeError: model unreachable"),
    ]
    # The letter was stored after the hook's last run.
    assert letters[0].seq > calls[-1][3]


async def test_on_dead_letter_runs_for_a_permanent_failure_but_not_for_an_undecodable_event(
    bus: Bus, tenant: str, run_event_worker: Callable[[Handler, Hook | None], Awaitable[None]]
) -> None:
    calls: list[tuple[str, str]] = []

    async def handler(event: RecordedEvent) -> None:
        raise PermanentFailure("unknown_thread", "no such thread")

    async def hook(event: RecordedEvent, reason: str, detail: str) -> None:
        calls.append((reason, detail))

    await run_event_worker(handler, hook)
    await bus.js.publish(
        event_subject(tenant, "thread", new_id()),
        b"not an event",
        headers={EVENT_TYPE_HEADER: "thread.created"},
    )
    await create_thread(bus, tenant)

    async def both_dead_lettered() -> list[tuple[str, str, bytes]]:
        letters = await dead_letters_for(bus, tenant)
        assert len(letters) == 2
        return letters

    letters = await assert_eventually(both_dead_lettered, timeout=30)
    assert sorted(reason for reason, _, _ in letters) == ["undecodable", "unknown_thread"]
    assert calls == [("unknown_thread", "no such thread")]


async def test_an_event_is_dead_lettered_even_when_its_hook_keeps_failing(
    bus: Bus, tenant: str, run_event_worker: Callable[[Handler, Hook | None], Awaitable[None]]
) -> None:
    attempts: list[int] = []

    async def handler(event: RecordedEvent) -> None:
        raise PermanentFailure("unknown_thread", "no such thread")

    async def hook(event: RecordedEvent, reason: str, detail: str) -> None:
        attempts.append(1)
        raise RuntimeError("the run's terminal event could not be written")

    await run_event_worker(handler, hook)
    await create_thread(bus, tenant)

    async def dead_lettered() -> None:
        letters = await dead_letters_for(bus, tenant)
        assert [(reason, detail) for reason, detail, _ in letters] == [
            ("unknown_thread", "no such thread")
        ]

    await assert_eventually(dead_lettered, timeout=30)
    assert len(attempts) == FAST.attempts


async def test_workers_outlive_a_broker_that_is_missing_then_killed_and_restarted(
    tmp_path: Path,
) -> None:
    """A worker started before the streams exist, and across a SIGKILL of the server, never
    leaves `run()`: it resubscribes and goes on handling events and commands."""
    tenant = "t" + new_id().lower()
    handled: list[str] = []
    commands: list[str] = []

    async def on_event(event: RecordedEvent) -> None:
        handled.append(event.envelope.aggregate_id)

    async def on_command(envelope: CommandEnvelope, delivery: Delivery) -> None:
        commands.append(envelope.idempotency_key)

    async with NatsServer(tmp_path / "nats") as server, Bus(server.url, name="outage") as bus:
        stop = asyncio.Event()
        spec = DurableSpec("outage-events", ("thread.created",))
        workers = [
            asyncio.create_task(
                EventWorker(bus, spec, on_event, retry=FAST_RETRY, poll_interval=0.2).run(stop)
            ),
            asyncio.create_task(
                CommandWorker(
                    bus.js, "registry", on_command, layout=bus.layout,
                    dead_letters=bus.dead_letters,
                    retry=FAST_RETRY, poll_interval=0.2,
                ).run(stop)
            ),
        ]  # fmt: skip
        try:
            # No stream yet: subscribing fails round after round, and the workers wait.
            await asyncio.wait(workers, timeout=1.0)
            assert not any(w.done() for w in workers)
            await provision(bus.js)
            first = await create_thread(bus, tenant)
            await bus.commands.send(
                tenant, CreateAgency(agency_id="a1", name="one"), idempotency_key="k1"
            )

            async def first_handled() -> None:
                assert handled == [first] and commands == ["k1"]

            await assert_eventually(first_handled, timeout=20)

            await server.kill()
            await asyncio.wait(workers, timeout=1.0)
            assert not any(w.done() for w in workers)
            await server.start()

            async def broker_back() -> None:
                try:
                    await bus.js.stream_info(EVENTS_STREAM)
                except Exception as e:
                    raise AssertionError(f"not back yet: {e}") from e

            await assert_eventually(broker_back, timeout=20)
            second = await create_thread(bus, tenant)
            await bus.commands.send(
                tenant, CreateAgency(agency_id="a2", name="two"), idempotency_key="k2"
            )

            async def second_handled() -> None:
                assert second in handled and "k2" in commands

            await assert_eventually(second_handled, timeout=30)
            assert not any(w.done() for w in workers)

            # The durables themselves lost (a cluster that lost their replicas): recreated.
            await bus.js.delete_consumer(EVENTS_STREAM, spec.name)
            await bus.js.delete_consumer(COMMANDS_STREAM, "registry-commands")
            third = await create_thread(bus, tenant)
            await bus.commands.send(
                tenant, CreateAgency(agency_id="a3", name="three"), idempotency_key="k3"
            )

            async def third_handled() -> None:
                assert third in handled and "k3" in commands

            await assert_eventually(third_handled, timeout=30)
            assert not any(w.done() for w in workers)
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*workers), timeout=15)


async def test_a_handler_failing_while_the_broker_is_away_waits_it_out_in_place(
    bus: Bus, tenant: str, run_event_worker: Callable[[Handler, Hook | None], Awaitable[None]]
) -> None:
    """Outages (a timeout, no stream answering, a connection being re-established) cost the
    message none of its two deliveries: the handler is tried again in place until the
    broker answers; the wait is logged and counted."""
    outages: list[Exception] = [
        nats.errors.TimeoutError(),
        nats.js.errors.NoStreamResponseError(),
        nats.errors.ConnectionReconnectingError(),
        nats.js.errors.NoStreamResponseError(),
        nats.errors.TimeoutError(),
    ]
    calls: list[int] = []
    done: list[tuple[str, int]] = []
    durable = "test-" + tenant

    def waits(outcome: str) -> float:
        labels = {"what": durable, "outcome": outcome}
        return OUTAGES.get_sample_value("agency_outage_waits_total", labels) or 0.0

    async def handler(event: RecordedEvent) -> None:
        calls.append(1)
        if outages:
            raise outages.pop(0)
        done.append((event.envelope.aggregate_id, len(calls)))

    with structlog.testing.capture_logs() as logs:
        await run_event_worker(handler, None)
        thread = await create_thread(bus, tenant)

        async def handled() -> None:
            assert done == [(thread, 6)]

        await assert_eventually(handled, timeout=30)
    assert await dead_letters_for(bus, tenant) == []
    assert waits("over") == 1 and waits("outlasted") == 0
    said = [(e["event"], e.get("what")) for e in logs if "outage" in e["event"]]
    assert said == [("waiting out an outage", durable), ("outage over", durable)]


async def test_a_message_that_cannot_be_opened_while_the_key_store_is_away_waits_it_out(
    bus: Bus,
    tenant: str,
    run_event_worker: Callable[[Handler, Hook | None], Awaitable[None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sealed event whose key cannot be fetched (the key store's connection timing out)
    is an outage, waited out in place: handled once the key comes, on its first delivery,
    with no error logged."""
    opened = eventworker.record_from_js_msg
    away = [TimeoutError("the key store did not connect within 5.0 s")] * 2

    def opening(msg: Msg) -> RecordedEvent | UndecodableEvent:
        if away:
            raise away.pop()
        return opened(msg)

    monkeypatch.setattr(eventworker, "record_from_js_msg", opening)
    done: list[tuple[str, int]] = []

    async def handler(event: RecordedEvent) -> None:
        done.append((event.envelope.aggregate_id, 1))

    with structlog.testing.capture_logs() as logs:
        await run_event_worker(handler, None)
        thread = await create_thread(bus, tenant)

        async def handled() -> None:
            assert done == [(thread, 1)] and away == []

        await assert_eventually(handled, timeout=30)
    assert await dead_letters_for(bus, tenant) == []
    errors = [e["event"] for e in logs if e["log_level"] == "error"]
    assert errors == [], errors
    assert any(e["event"] == "waiting out an outage" for e in logs)


async def test_an_outage_that_outlasts_its_wait_costs_one_delivery_and_is_logged(
    bus: Bus, tenant: str
) -> None:
    """Past `max_wait` the delivery counts as failed: handed back, and handled on the next
    once the broker answers again."""
    spec = DurableSpec("test-" + tenant, ("thread.created",))
    await new_events_consumer(bus, spec)
    calls: list[float] = []
    done: list[str] = []
    loop = asyncio.get_running_loop()

    async def handler(event: RecordedEvent) -> None:
        if event.envelope.tenant_id != tenant:
            return
        calls.append(loop.time())
        if calls[-1] - calls[0] < 1.0:  # the broker is away for a second
            raise nats.errors.TimeoutError
        done.append(event.envelope.aggregate_id)

    short = WorkerRetry(
        settle=FAST,
        hook=FAST,
        subscribe=FAST_RETRY.subscribe,
        outage=OutageWait(max_wait=0.2, wait_initial=0.05, wait_max=0.05),
    )
    worker = EventWorker(bus, spec, handler, max_deliver=5, retry=short)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        with structlog.testing.capture_logs() as logs:
            thread = await create_thread(bus, tenant)

            async def handled() -> None:
                assert done == [thread]

            await assert_eventually(handled, timeout=30)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        await bus.js.delete_consumer(EVENTS_STREAM, spec.name)
    events = [e["event"] for e in logs]
    assert "outage outlasted its wait" in events
    assert "handler failed, will retry" in events
    assert await dead_letters_for(bus, tenant) == []


@pytest.mark.cluster
@pytest.mark.slow
async def test_workers_on_a_cluster_outlive_the_loss_of_their_consumers_leader(
    tmp_path: Path,
) -> None:
    """R3 streams on three nodes; the node leading a worker's consumer is SIGKILLed: the
    workers stay in `run()` and handle what is written after, while it is down."""
    tenant = "t" + new_id().lower()
    handled: list[str] = []
    commands: list[str] = []

    async def on_event(event: RecordedEvent) -> None:
        handled.append(event.envelope.aggregate_id)

    async def on_command(envelope: CommandEnvelope, delivery: Delivery) -> None:
        commands.append(envelope.idempotency_key)

    patient = RetryPolicy(attempts=None, timeout=60.0, wait_initial=0.2, wait_max=2.0)

    async with NatsCluster(tmp_path / "cluster") as cluster, Bus(cluster.url) as bus:
        await provision(bus.js, StreamSettings(replicas=3))
        stop = asyncio.Event()
        spec = DurableSpec("cluster-events", ("thread.created",))
        workers = [
            asyncio.create_task(
                EventWorker(bus, spec, on_event, retry=FAST_RETRY, poll_interval=0.2).run(stop)
            ),
            asyncio.create_task(
                CommandWorker(
                    bus.js, "registry", on_command, layout=bus.layout,
                    dead_letters=bus.dead_letters,
                    retry=FAST_RETRY, poll_interval=0.2,
                ).run(stop)
            ),
        ]  # fmt: skip

        async def write(key: str) -> str:
            thread = await patient.call(is_transient, create_thread, bus, tenant)
            await patient.call(
                is_transient,
                bus.commands.send,
                tenant,
                CreateAgency(agency_id=key, name=key),
                idempotency_key=key,
            )
            return thread

        try:
            first = await write("k1")

            async def first_handled() -> None:
                assert first in handled and "k1" in commands

            await assert_eventually(first_handled, timeout=30)
            info = await patient.call(is_transient, bus.js.consumer_info, EVENTS_STREAM, spec.name)
            leader = info.cluster.leader if info.cluster else None
            victim = next(i for i, n in enumerate(cluster.nodes) if n.server_name == leader)
            await cluster.kill_node(victim)

            second = await write("k2")

            async def second_handled() -> None:
                assert second in handled and "k2" in commands

            await assert_eventually(second_handled, timeout=60)
            assert not any(w.done() for w in workers)
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*workers), timeout=20)


class _RecordingFeed(PullFeed):
    """A feed recording the batch of each pull request it makes."""

    def __init__(self, sub: JetStreamContext.PullSubscription, expires: float) -> None:
        super().__init__(sub, expires)
        self.requests: list[int] = []

    async def _request(self, batch: int) -> None:
        self.requests.append(batch)
        await super()._request(batch)


class _RecordingCommands(CommandWorker):
    """A command worker whose feeds record their pull requests."""

    feeds: list[_RecordingFeed]

    def _feed(self, sub: JetStreamContext.PullSubscription) -> PullFeed:
        feed = _RecordingFeed(sub, self._poll_interval)
        self.feeds = [*getattr(self, "feeds", []), feed]
        return feed


async def test_a_worker_takes_messages_from_one_open_request_for_no_more_than_its_slots(
    bus: Bus, tenant: str
) -> None:
    """A pull request stays open while messages trickle in, and the broker hands each over
    as it comes: an idle worker makes no request per message. No request asks for more
    than the worker's free slots, so what it holds stays within its bound."""
    service = "fetch" + tenant[-8:]
    handled: list[str] = []
    backlog, late, slots = 12, 5, 8

    async def handler(envelope: CommandEnvelope, delivery: Delivery) -> None:
        handled.append(envelope.idempotency_key or "")

    async def send(key: str) -> None:
        envelope = CommandEnvelope(
            command_id=new_id(), tenant_id=tenant, idempotency_key=key, ts=utc_now(),
            type="runtime.cancel", version=1,
            payload=CancelRun(agency_id="a", thread_id=key, reason="test"),
        )  # fmt: skip
        await bus.js.publish(command_subject(tenant, service, "cancel"), encode(envelope))

    for i in range(backlog):
        await send(f"early-{i}")
    # A request stays open 10 s (`poll_interval`), far longer than a message takes to be
    # handled here: the late messages come through requests made before them.
    worker = _RecordingCommands(
        bus.js, service, handler, layout=bus.layout, dead_letters=bus.dead_letters,
        batch=slots, poll_interval=10.0,
    )  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))

    def handled_count(count: int) -> Callable[[], Awaitable[None]]:
        async def check() -> None:
            assert len(handled) == count, handled

        return check

    try:
        await assert_eventually(handled_count(backlog), timeout=10)
        before = sum(len(feed.requests) for feed in worker.feeds)
        for i in range(late):
            await send(f"late-{i}")
            await assert_eventually(handled_count(backlog + i + 1), timeout=10)
        after = sum(len(feed.requests) for feed in worker.feeds)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=20)
    requests = [batch for feed in worker.feeds for batch in feed.requests]
    assert requests and all(1 <= batch <= slots for batch in requests), requests
    assert requests[0] == slots  # an idle worker asks for all its free slots
    assert after - before < late, requests  # not a request per message
