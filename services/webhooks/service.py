"""`agency serve webhooks`: agencies' webhook subscriptions, and runs' own webhooks.

Subscriptions (`fanout.py`, `dispatch.py`, docs/protocols.md): events of the subscribed
kinds become deliveries in PostgreSQL, attempted on a schedule of about a day. A2A push
notifications (`push.py`): a task's status changes become deliveries of the same table, to
each of the task's push configs, attempted alike.

Runs' webhooks: POST a run's end to the URL its request named.

Reacts to run terminals (`run.completed`, `run.error`, `run.canceled`) and to a run
stopping at an interrupt (`run.paused`, reason `hitl`: LangGraph's run is over there,
`success`; the run's resumed rest POSTs again when it ends), durable `webhooks`. When
the `request.accepted` of the run (found back from its end, `run_end.request_of`: the
thread's older events are not read) named a `webhook`, the run's end is POSTed there as
JSON (`run_id`, `thread_id`, `assistant_id`, `agency_id`, `status` in LangGraph's words,
`error`, `ended_at`), signed (`services/webhook_signing.py`), through the egress guard
every tenant connection goes through. A failed POST (a connection error, a timeout, 408,
429, 5xx) is retried with backoff (`stamina`); what is still failing, or refused (another
4xx, an address the egress rule refuses, no secret), is dead-lettered with the reason.
Delivery is at least once: a receiver deduplicates on the `X-Agency-Event-Id` header (the
id of the event that ended the run).

Runs' threads deleted at their end (LangGraph's `on_completion="delete"`,
`services/threads/run_end.py`), durable `run_end_deletions`; end users forgotten and
agencies deleted (`services/threads/scope_erasure.py`), durable `erasures`.
"""

from __future__ import annotations

import asyncio
import time

import httpx2
import msgspec
import stamina
import structlog

from agency.contracts.events import (
    RunCanceled,
    RunCompleted,
    RunError,
    RunPaused,
)
from agency.infra import db
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import (
    ERASURE_REQUESTS,
    RUN_END_DELETIONS,
    WEBHOOK_EVENTS,
)
from agency.infra.jetstream.eventworker import EventWorker, PermanentFailure
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.retry import RetryPolicy
from agency.services.egress import EgressPolicy, EgressRefused, guarded_transport
from agency.services.threads.retention import RetentionSweeper
from agency.services.threads.retention_policy import RetentionSettings
from agency.services.threads.run_end import DeleteOnRunEnd, request_of
from agency.services.threads.tenant_erasure import ErasureRequests, TenantUsers
from agency.services.webhook_signing import (
    EVENT_HEADER,
    SECRET_VARIABLE,
    SIGNATURE_HEADER,
    secret,
    signature,
)
from agency.services.webhooks.deliveries import SCHEDULE, Deliveries
from agency.services.webhooks.dispatch import Dispatcher, DispatchSettings
from agency.services.webhooks.fanout import SUBSCRIBED_EVENTS, Fanout
from agency.services.webhooks.push import PUSHED_EVENTS, PushFanout

log = structlog.get_logger(__name__)

ATTEMPTS = 5
TIMEOUT = 10.0
# A run's end in LangGraph's words.
STATUS = {RunCompleted: "success", RunError: "error", RunCanceled: "interrupted"}


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    thread_id: str
    assistant_id: str
    agency_id: str | None
    status: str
    error: str | None = None
    ended_at: str


class Retryable(Exception):
    """A failure worth another attempt: the receiver is busy or away."""


async def _post(url: str, body: bytes, event_id: str, key: str) -> None:
    policy = EgressPolicy.from_env()
    async with httpx2.AsyncClient(transport=guarded_transport(policy), timeout=TIMEOUT) as http:
        async for attempt in stamina.retry_context(
            on=(Retryable, httpx2.TransportError), attempts=ATTEMPTS, wait_initial=0.2,
            wait_max=5.0, timeout=60.0,
        ):  # fmt: skip
            with attempt:
                headers = {
                    "Content-Type": "application/json",
                    SIGNATURE_HEADER: signature(body, key, int(time.time())),
                    EVENT_HEADER: event_id,
                }
                try:
                    response = await http.post(url, content=body, headers=headers)
                except httpx2.InvalidURL as e:
                    raise PermanentFailure("webhook_refused", f"the URL is refused: {e}") from e
                if response.status_code in (408, 429) or response.status_code >= 500:
                    raise Retryable(f"{url[:200]} answered {response.status_code}")
                if response.status_code >= 400:
                    raise PermanentFailure(
                        "webhook_refused", f"{url[:200]} answered {response.status_code}"
                    )


class Webhooks:
    def __init__(self, bus: Bus) -> None:
        self._bus = bus

    async def handle(self, event: RecordedEvent) -> None:
        payload = event.payload
        status = STATUS.get(type(payload))
        if isinstance(payload, RunPaused) and payload.reason in ("hitl", "breakpoint"):
            status = "success"  # stopped at an interrupt: LangGraph's run is over
        run_id = getattr(payload, "run_id", None)
        if status is None or not isinstance(run_id, str):
            return
        env = event.envelope
        request = await request_of(self._bus, event, run_id)
        url = request.webhook if request is not None else None
        if url is None:
            return
        key = secret()
        if key is None:
            raise PermanentFailure("webhook_unsigned", f"{SECRET_VARIABLE} is not set")
        first = await self._bus.store.first(env.tenant_id, "thread", env.aggregate_id)
        created = first.payload if first is not None else None
        delivery = Delivery(
            run_id=run_id,
            thread_id=env.aggregate_id,
            assistant_id=getattr(created, "agent_type", ""),
            agency_id=env.agency_id,
            status=status,
            error=payload.error if isinstance(payload, RunError) else None,
            ended_at=env.ts.isoformat(),
        )
        try:
            await _post(url, msgspec.json.encode(delivery), env.event_id, key)
        except EgressRefused as e:
            raise PermanentFailure("webhook_egress_refused", str(e)) from e
        except (Retryable, httpx2.TransportError) as e:
            raise PermanentFailure(
                "webhook_failed", f"gave up after {ATTEMPTS} attempts: {e}"
            ) from e
        log.info("webhook_delivered", run_id=run_id, status=status)


async def run_webhooks(
    nats_url: str,
    database_url: str,
    stop: asyncio.Event,
    *,
    ack_wait: float = 120.0,
    dispatch: DispatchSettings | None = None,
    schedule: RetryPolicy = SCHEDULE,
    nats_users: TenantUsers | None = None,
) -> None:
    """Runs' webhooks, and subscriptions' deliveries (read from the log, then attempted),
    the deletions of threads whose run ended or whose retention passed, and those asked
    (`erasures`; a deleted tenant's NATS user removed from `nats_users`), until `stop`
    is set."""
    retention = RetentionSettings.from_env()
    pool = await db.create_pool(database_url, max_size=4)
    try:
        async with pool.acquire() as conn:
            await db.migrate(conn)  # its deliveries' table, also when it starts first
        async with Bus(nats_url, name="agency-webhooks") as bus, asyncio.TaskGroup() as tasks:
            runs = EventWorker(
                bus, WEBHOOK_EVENTS, Webhooks(bus).handle, ack_wait=ack_wait, max_deliver=1
            )
            dispatcher = Dispatcher(Deliveries(pool, schedule=schedule), dispatch)
            fanout = Fanout(Deliveries(pool, schedule=schedule), dispatcher.wake)
            # A database away for a while delays deliveries; only ~15 min of it loses them.
            subscribed = EventWorker(
                bus, SUBSCRIBED_EVENTS, fanout.handle, ack_wait=ack_wait, max_deliver=100
            )
            push = PushFanout(Deliveries(pool, schedule=schedule), bus.store, dispatcher.wake)
            pushed = EventWorker(
                bus, PUSHED_EVENTS, push.handle, ack_wait=ack_wait, max_deliver=100
            )
            ends = EventWorker(
                bus, RUN_END_DELETIONS, DeleteOnRunEnd(bus, pool).handle, ack_wait=ack_wait
            )
            erasing = ErasureRequests(bus, nats_users)
            erasures = EventWorker(bus, ERASURE_REQUESTS, erasing.handle, ack_wait=ack_wait)
            tasks.create_task(runs.run(stop))
            tasks.create_task(ends.run(stop))
            tasks.create_task(erasures.run(stop))
            tasks.create_task(RetentionSweeper(bus, pool, retention).run(stop))
            tasks.create_task(subscribed.run(stop))
            tasks.create_task(pushed.run(stop))
            tasks.create_task(dispatcher.run(stop))
    finally:
        await asyncio.wait_for(pool.close(), timeout=10)
