"""The one consumer loop of every durable pull consumer: events, commands, tool requests.

- It takes messages through one open pull request (`pullfeed.py`) for no more than its free
  slots, so nothing waits unheeded in the client while its ack wait runs out, and the
  broker hands each message over as it comes, with no request of its own: `poll_interval`
  is how long a request stays open, and bounds how soon `stop` is seen.
- A message being worked on is heartbeated (`in_progress`), so a long handler is not
  redelivered.
- `_process` never raises but `CancelledError`: a handler's failure is retried through
  redelivery (a nak with the backoff's delay) and dead-lettered after `max_deliver`
  attempts. An outage of the broker or the database is no failure of the message: the
  handler waits it out in place (`infra/outage.py`, at most `AGENCY_OUTAGE_MAX_WAIT`
  seconds), so a restart uses up none of its deliveries; ack, nak,
  term, in_progress and the dead-letter publish are retried under the shared retry policy
  and logged when they still fail (the broker then redelivers).
- A failed fetch or subscribe is retried under the policy, round after round, until it
  works or `stop` is set: nothing but cancellation escapes `run()`. A cluster that lost a
  node answers `nats: timeout` for a few seconds; the worker waits it out.
- On `stop`, messages in flight get `shutdown_grace` seconds; the rest are cancelled and
  handed back (nak), so another worker takes them at once.
- Messages may go in lanes (`lanes.py`): a subclass names each message's lane (`_lane`,
  e.g. its aggregate), a lane runs one handler at a time, `concurrency` handlers run at
  once, and the worker may hold more (`held`) so a busy lane does not keep the others
  waiting. A tenant's running handlers and held messages may be bounded too; a message
  beyond its tenant's held bound is dead-lettered (`tenant_backlog`) at once.
- What a worker holds may be shared among tenants by weight (`shares`): once it holds all
  it may, a message a tenant sent through the gateway (its own NATS credentials) while it
  holds its share or more is dead-lettered at once (`tenant_share_exceeded`), so one
  tenant's flood drains quickly and the others' commands behind it are taken up.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import time
from collections.abc import Hashable
from typing import Generic, TypeVar, Unpack

import nats.errors
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from agency.contracts.subjects import VIA_GATEWAY_HEADER
from agency.infra.jetstream.deadletter import DeadLetters
from agency.infra.jetstream.lanes import (
    TENANT_BACKLOG,
    TENANT_SHARE,
    LaneBounds,
    Lanes,
    subject_tenant,
)
from agency.infra.jetstream.outcomes import (
    Ack,
    Erased,
    Outcome,
    Reject,
    Retry,
    Undecodable,
    describe,
)
from agency.infra.jetstream.pullfeed import PullFeed
from agency.infra.jetstream.settling import DeadLetterHook, Settling
from agency.infra.jetstream.worker_tuning import WorkerRetry, WorkerTuning
from agency.infra.retry import until_stopped

T = TypeVar("T")

_SETTLE_TIMEOUT = 2.0


def _subscribe_failure(exc: Exception) -> bool:
    """Creating or binding a durable is worth retrying on any broker error: right after a
    node is lost, even "stream not found" can be the cluster still electing a leader."""
    return isinstance(exc, nats.errors.Error | OSError | TimeoutError)


class ConsumerWorker(abc.ABC, Generic[T]):
    """Runs a durable pull consumer; subclasses say how to subscribe, decode and handle."""

    def __init__(
        self,
        *,
        dead_letters: DeadLetters,
        source_stream: str,
        durable: str,
        concurrency: int,
        ack_wait: float,
        max_deliver: int,
        backoff: tuple[float, ...],
        on_dead_letter: DeadLetterHook[T] | None = None,
        **tuning: Unpack[WorkerTuning],
    ) -> None:
        held = tuning.get("held")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        if held is not None and held < concurrency:
            raise ValueError(f"held ({held}) must be at least concurrency ({concurrency})")
        if not backoff:
            raise ValueError("backoff needs at least one delay")
        self._source_stream = source_stream
        self.durable = durable
        self._log = structlog.get_logger(__name__, durable=durable)
        self._concurrency = concurrency
        self._ack_wait = ack_wait
        self._max_deliver = max_deliver
        self._backoff = backoff
        self._shutdown_grace = tuning.get("shutdown_grace", 5.0)
        self._poll_interval = tuning.get("poll_interval", 1.0)
        self._retry = tuning.get("retry") or WorkerRetry()
        self._settling = Settling[T](
            durable=durable,
            dead_letters=dead_letters,
            ack_wait=ack_wait,
            backoff=backoff,
            retry=self._retry,
            on_dead_letter=on_dead_letter,
        )
        self._held = held or concurrency
        self._shares = tuning.get("shares")
        self._lanes = Lanes(
            LaneBounds(concurrency, tuning.get("tenant_running", 0), tuning.get("tenant_held", 0))
        )

    # --- what a subclass provides -------------------------------------------------------

    @abc.abstractmethod
    async def _subscribe(self, partition: int = 0) -> JetStreamContext.PullSubscription:
        """Create or update the durable (on `partition`'s stream, for a consumer of a log
        of several partitions) and bind to it."""

    def _partitions(self) -> int:
        """How many streams the worker consumes from, one durable on each (a loop each)."""
        return 1

    @abc.abstractmethod
    def _decode(self, msg: Msg) -> T:
        """What the message carries; raises `Undecodable`."""

    @abc.abstractmethod
    async def _handle(self, item: T, msg: Msg) -> Outcome[T]:
        """Act on one message. Raising means a failure: retried, then dead-lettered."""

    def _lane(self, item: T, msg: Msg) -> Hashable | None:
        """The lane whose handlers run one at a time (None: no lane, only the bounds)."""
        return None

    def _wants(self, msg: Msg) -> bool:
        """Whether the message is this worker's, told without decoding it; one that is not
        is acked at once and never handled."""
        return True

    def _wants_item(self, item: T) -> bool:
        """Whether a decoded message is this worker's (for what `_wants` could not tell)."""
        return True

    # --- the loop -----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Process messages until `stop` is set, then let those in flight finish within
        `shutdown_grace` seconds; the rest are cancelled and handed back to the broker.

        On a log of several partitions, one loop per partition's durable; the bounds
        (`concurrency`, `held`, a tenant's share) hold for all of them together."""
        in_flight: set[asyncio.Task[None]] = set()
        partitions = self._partitions()
        if partitions == 1:
            await self._run_partition(stop, 0, in_flight)
            return
        async with asyncio.TaskGroup() as tg:
            for partition in range(partitions):
                tg.create_task(self._run_partition(stop, partition, in_flight))

    async def _run_partition(
        self, stop: asyncio.Event, partition: int, in_flight: set[asyncio.Task[None]]
    ) -> None:
        sub = await self._subscribe_until_stopped(stop, partition)
        if sub is None:
            return
        self._log.info(
            "consumer started",
            concurrency=self._concurrency,
            held=self._held,
            **({"partition": partition} if self._partitions() > 1 else {}),
        )
        feed = self._feed(sub)
        failures = 0
        try:
            async with asyncio.TaskGroup() as tg:
                try:
                    while not stop.is_set():
                        free = self._held - len(in_flight)
                        if free <= 0:
                            await asyncio.wait(
                                set(in_flight),
                                timeout=self._poll_interval,
                                return_when=asyncio.FIRST_COMPLETED,
                            )
                            continue
                        try:
                            msgs = await feed.take(free, timeout=self._poll_interval)
                        except (nats.errors.Error, OSError) as e:
                            failures += 1
                            self._log.warning(
                                "fetch failed, resubscribing",
                                error=describe(e),
                                failures=failures,
                            )
                            await self._unsubscribe(sub)
                            await until_stopped(
                                stop, asyncio.sleep(self._retry.subscribe.delay(failures))
                            )
                            renewed = await self._subscribe_until_stopped(stop, partition)
                            if renewed is None:
                                return
                            sub, feed = renewed, self._feed(renewed)
                            continue
                        failures = 0
                        for msg in msgs:
                            if not self._wants(msg):
                                await self._settling.signal("ack", msg.ack)
                                continue
                            task = tg.create_task(self._process(msg, subject_tenant(msg.subject)))
                            in_flight.add(task)
                            task.add_done_callback(in_flight.discard)
                finally:
                    await self._wind_down(in_flight)
        finally:
            await self._unsubscribe(sub)
            self._log.info("consumer stopped")

    def _feed(self, sub: JetStreamContext.PullSubscription) -> PullFeed:
        """What takes the subscription's messages: a pull request open `poll_interval`."""
        return PullFeed(sub, self._poll_interval)

    async def _subscribe_until_stopped(
        self, stop: asyncio.Event, partition: int = 0
    ) -> JetStreamContext.PullSubscription | None:
        """A subscription, or None once `stop` is set. Each round of the retry policy that
        fails is logged, and another begins."""
        while not stop.is_set():
            try:
                return await until_stopped(
                    stop,
                    self._retry.subscribe.call(_subscribe_failure, self._subscribe, partition),
                )
            except (nats.errors.Error, OSError, TimeoutError) as e:
                self._log.error(
                    "consumer unavailable, still retrying",
                    error=describe(e),
                )
        return None

    async def _unsubscribe(self, sub: JetStreamContext.PullSubscription) -> None:
        with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
            await asyncio.wait_for(sub.unsubscribe(), timeout=_SETTLE_TIMEOUT)

    async def _wind_down(self, in_flight: set[asyncio.Task[None]]) -> None:
        if not in_flight:
            return
        _, pending = await asyncio.wait(set(in_flight), timeout=self._shutdown_grace)
        for task in pending:
            task.cancel()
        if pending:
            self._log.info(
                "work cancelled at shutdown, handed back for redelivery",
                count=len(pending),
            )

    # --- one message ----------------------------------------------------------------------

    def _hold(self, msg: Msg, tenant: str) -> tuple[str, str] | None:
        """Count a fetched message as held by its tenant; the refusal (reason, detail) of
        one beyond its tenant's bound or share, counted nowhere."""
        backlog = self._lanes.hold(tenant)
        if backlog is not None:
            return TENANT_BACKLOG, backlog
        if self._shares is None:
            return None
        via_gateway = VIA_GATEWAY_HEADER in (msg.headers or {})
        over = self._shares.hold(tenant, time.monotonic(), refusable=via_gateway)
        if over is None:
            return None
        self._lanes.release(tenant)
        return TENANT_SHARE, over

    async def _process(self, msg: Msg, tenant: str) -> None:
        """Never raises but `CancelledError`: no message and no failure stops the worker."""
        refused = self._hold(msg, tenant)
        try:
            async with self._settling.heartbeat(msg):
                outcome = await self._outcome(msg, tenant, refused)
                source = self._source_stream if self._partitions() == 1 else None
                await self._settling.settle(msg, outcome, source)
        except asyncio.CancelledError:
            with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
                await asyncio.wait_for(msg.nak(), timeout=_SETTLE_TIMEOUT)
            raise
        except Exception:  # a bug of ours: unsettled, the message comes back after ack_wait
            self._log.exception("message processing failed")
        finally:
            if refused is None:
                self._lanes.release(tenant)
                if self._shares is not None:
                    self._shares.release(tenant, time.monotonic())

    async def _decoded(self, msg: Msg) -> T:
        return self._decode(msg)

    async def _outcome(self, msg: Msg, tenant: str, refused: tuple[str, str] | None) -> Outcome[T]:
        try:
            # A sealed message opens only with its key: the key store away is an outage,
            # waited out in place (the message held by heartbeats), not a failure.
            item = await self._retry.outage.wait_out(self.durable, self._decoded, msg)
        except Erased:
            return Ack()
        except Undecodable as e:
            return Reject("undecodable", e.reason)
        if not self._wants_item(item):
            return Ack()
        if refused is not None:
            reason, detail = refused
            self._log.warning(
                "tenant over its bound or share, dead-lettered",
                tenant_id=tenant,
                reason=reason,
                detail=detail,
            )
            return Reject(reason, detail, item)
        attempt = msg.metadata.num_delivered
        try:
            async with self._lanes.turn(self._lane(item, msg), tenant):
                return await self._retry.outage.wait_out(self.durable, self._handle, item, msg)
        except Exception as e:  # retried through redelivery, then dead-lettered
            # An outage that outlasted its wait counts as one failed delivery: the
            # broker's own bound on deliveries leaves no way to hand it back for free.
            detail = describe(e)
            if attempt >= self._max_deliver:
                self._log.error("handler failed for good", attempt=attempt, exc_info=e)
                return Reject("exhausted", detail, item)
            delay = self._backoff[min(attempt - 1, len(self._backoff) - 1)]
            self._log.warning(
                "handler failed, will retry",
                attempt=attempt,
                delay=delay,
                exc_info=e,
            )
            return Retry(delay)
