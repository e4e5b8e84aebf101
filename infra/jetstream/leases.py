"""Leases in a JetStream key-value bucket: one owner per key across every process.

A lease is a key created with `create` (which fails while the key exists), renewed by an
`update` that names the revision the owner last wrote, and released by a delete that names
it too. The bucket's `max_age` is the lease's time to live: an owner that dies (or loses
the broker) stops renewing, and its key expires within `ttl` seconds, so another process
can take over. An owner that cannot renew within `ttl` minus a margin treats the lease as
lost and stops its work before anyone else can have taken it.

The runtime holds one lease per thread while it drives the thread, so one worker at a time
makes the thread's model calls, however many workers share the trigger consumer.

The bucket is kept in memory: a restarted server has lost it, with every lease in it. The
first operation that finds it gone makes it again and goes on (`_on_bucket`); an owner's
next renewal then fails and its lease is lost: a new bucket's revisions begin at the clock
(in microseconds), past every revision the lost one gave out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog
from nats.errors import (
    Error as NatsError,
    NoRespondersError,
    TimeoutError as NatsTimeoutError,
)
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    Error as JetStreamError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyValueError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
    NotFoundError,
)
from nats.js.kv import KeyValue

from agency.contracts.errors import StructuredError
from agency.infra.tasks import cancel_and_wait, cancel_requested

log = structlog.get_logger(__name__)

T = TypeVar("T")

LEASES_BUCKET = "AGENCY_LEASES"
DEFAULT_TTL = 10.0

# The headers of a key-value delete (what `KeyValue.delete` sends), sent here to learn the
# revision of the delete marker.
KV_OPERATION = "KV-Operation"
KV_DELETE = "DEL"
EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
# How many released keys are remembered (a few bytes each).
_RELEASED_KEPT = 10_000

# Transient failures of a lease operation: the broker did not answer in time, or the
# connection is being re-established. Anything else is a bug or a refusal.
_TRANSIENT = (NatsTimeoutError, TimeoutError, NatsError)
_STREAM_NOT_FOUND = 10059


def _bucket_gone(error: Exception) -> bool:
    """Nothing answers for the bucket (a write, a direct get), or the server says it has no
    such stream: a restarted server without it, or one still loading it."""
    if isinstance(error, NoStreamResponseError | NoRespondersError):
        return True
    return (
        isinstance(error, NotFoundError)
        and not isinstance(error, KeyValueError)
        and getattr(error, "err_code", None) == _STREAM_NOT_FOUND
    )


class LeaseLost(StructuredError):
    """The lease could not be renewed in time: another owner may take over."""

    key: str
    message = "lease {key!r} was lost (not renewed within its time to live)"


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    ttl: float = DEFAULT_TTL
    replicas: int = 1
    # A single operation's wait; an owner retries renewals until `ttl - margin` has passed
    # since the last success, which rides out a cluster leader election (about 5 s).
    op_timeout: float = 2.0

    @property
    def renew_every(self) -> float:
        return self.ttl / 4

    @property
    def renewal_bound(self) -> float:
        """The longest a renewal takes: its write, the bucket bound again, the write again."""
        return self.op_timeout * 4

    @property
    def margin(self) -> float:
        return max(self.ttl / 5, self.op_timeout)


class Lease:
    """A held lease. `keep()` renews it until cancelled, raising `LeaseLost` if it fails.

    A renewal runs to its end even when `keep()` is cancelled meanwhile: the server may have
    written it already, and only its answer tells the revision the release must name. So
    `release()` first waits (bounded) for a renewal still in flight."""

    def __init__(self, leases: Leases, key: str, revision: int) -> None:
        self._leases = leases
        self.key = key
        self.revision = revision
        self._renewal: asyncio.Future[None] | None = None

    async def keep(self) -> None:
        settings = self._leases.settings
        loop = asyncio.get_running_loop()
        last_success = loop.time()
        while True:
            await asyncio.sleep(settings.renew_every)
            while True:
                if cancel_requested():
                    raise asyncio.CancelledError  # a cancellation a request swallowed
                self._renewal = asyncio.ensure_future(self._renew())
                self._renewal.add_done_callback(_retrieved)
                try:
                    await asyncio.shield(self._renewal)
                except KeyWrongLastSequenceError as e:
                    raise LeaseLost(self.key) from e
                except _TRANSIENT:
                    if loop.time() - last_success > settings.ttl - settings.margin:
                        raise LeaseLost(self.key) from None
                    await asyncio.sleep(0.25)
                    continue
                last_success = loop.time()
                break

    async def _renew(self) -> None:
        self.revision = await self._leases.renew(self.key, self.revision)

    async def release(self) -> None:
        renewal = self._renewal
        if renewal is not None and not renewal.done():
            # Its outcome was `keep()`'s to act on; here only the revision it leaves matters
            # (a lost lease's release simply fails). A renewal is bounded (`Leases.renew`).
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.shield(renewal), timeout=self._leases.settings.renewal_bound
                )
        await self._leases.release(self.key, self.revision)


def _retrieved(renewal: asyncio.Future[None]) -> None:
    """A renewal's failure is retrieved, so one that outlived its `keep()` is not reported."""
    if not renewal.cancelled():
        renewal.exception()


class Leases:
    def __init__(
        self,
        js: JetStreamContext,
        owner: str,
        settings: LeaseSettings | None = None,
        *,
        bucket: str = LEASES_BUCKET,
    ) -> None:
        self._js = js
        self.owner = owner.encode()
        self.settings = settings or LeaseSettings()
        self._bucket = bucket
        self._kv: KeyValue | None = None
        # Keys released here lately: their delete marker's revision, and when.
        self._released: OrderedDict[str, tuple[int, float]] = OrderedDict()
        # Releases of leases taken for callers cancelled meanwhile (`_taken`).
        self._letting_go: set[asyncio.Future[None]] = set()

    async def open(self) -> Leases:
        """Bind the bucket, creating it on first use (races with other processes are fine:
        the same configuration created twice is accepted by the server)."""
        try:
            self._kv = await self._js.key_value(self._bucket)
        except (BucketNotFoundError, NotFoundError):
            config = KeyValueConfig(
                bucket=self._bucket,
                description="Who drives what, right now; entries expire when not renewed.",
                history=1,
                ttl=self.settings.ttl,
                storage=StorageType.MEMORY,
                replicas=self.settings.replicas,
            )
            try:
                self._kv = await self._js.create_key_value(config)
            except BadRequestError:
                self._kv = await self._js.key_value(self._bucket)
                return self
            # Its revisions begin at the clock in microseconds: an owner of a lease from a
            # bucket a restart lost never finds its old revision among the new bucket's.
            first = time.time_ns() // 1000
            await self._js.purge_stream(f"KV_{self._bucket}", seq=first)
            log.info("lease bucket created", bucket=self._bucket, first_revision=first)
        return self

    async def _on_bucket(self, operation: Callable[[KeyValue], Awaitable[T]]) -> T:
        """`operation` on the bucket; if the bucket is gone, it is made again (or bound
        again, once a restarted server has loaded it) and `operation` tried once more.
        While the server cannot answer at all, its error is raised: an outage."""
        try:
            return await operation(self.kv)
        except (NatsError, TimeoutError) as e:
            if not _bucket_gone(e):
                raise
            log.warning("lease bucket not answering; binding it again", error=repr(e))
        await asyncio.wait_for(self.open(), timeout=self.settings.op_timeout * 2)
        return await operation(self.kv)

    def _bounded(self, call: Awaitable[T]) -> Awaitable[T]:
        return asyncio.wait_for(call, timeout=self.settings.op_timeout)

    @property
    def kv(self) -> KeyValue:
        assert self._kv is not None, "Leases.open() was not awaited"
        return self._kv

    async def try_acquire(self, key: str) -> Lease | None:
        """The lease, or None while another owner holds it."""
        released = self._released.pop(key, None)
        fresh = self.settings.ttl - self.settings.margin
        if released is not None and self._loop_time() - released[1] < fresh:
            # Released here a moment ago: its delete marker is the key's last revision
            # unless someone took the lease since, so one conditional write takes it.
            last = released[0]
            try:
                revision = await self._on_bucket(
                    lambda kv: self._bounded(kv.update(key, self.owner, last=last))
                )
                return Lease(self, key, revision)
            except KeyWrongLastSequenceError:
                pass  # written since (or the marker expired): ask as anyone would
        try:
            # One write for a key never held (or long expired); three for a released one
            # (the write, a read finding the delete marker, the write after it).
            revision = await self._on_bucket(lambda kv: self._bounded(kv.create(key, self.owner)))
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            # Held; or held a moment ago and expired while `create` looked it up.
            return None
        return Lease(self, key, revision)

    async def renew(self, key: str, revision: int) -> int:
        return await self._on_bucket(
            lambda kv: self._bounded(kv.update(key, self.owner, last=revision))
        )

    async def release(self, key: str, revision: int) -> None:
        """Give the lease up (a delete marker naming the revision held); if that fails it
        simply expires. The marker's revision is kept a while, so taking the lease here
        again is one write."""
        headers = {KV_OPERATION: KV_DELETE, EXPECTED_LAST_SUBJECT_SEQUENCE: str(revision)}
        with contextlib.suppress(*_TRANSIENT, JetStreamError, KeyNotFoundError):
            ack = await self._js.publish(
                f"$KV.{self._bucket}.{key}", b"", timeout=self.settings.op_timeout, headers=headers
            )
            self._released[key] = (ack.seq, self._loop_time())
            self._released.move_to_end(key)
            while len(self._released) > _RELEASED_KEPT:
                self._released.popitem(last=False)

    @staticmethod
    def _loop_time() -> float:
        return asyncio.get_running_loop().time()

    async def holder(self, key: str) -> bytes | None:
        try:
            entry = await self._on_bucket(lambda kv: self._bounded(kv.get(key)))
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return entry.value

    async def _taken(self, key: str) -> Lease | None:
        """`try_acquire`, run to its end even when the caller is cancelled meanwhile: the
        broker may have written the key already, and a lease nobody keeps would hold the
        key until it expired. A lease taken for a caller gone is let go at once."""
        taking = asyncio.ensure_future(self.try_acquire(key))
        try:
            return await asyncio.shield(taking)
        except asyncio.CancelledError:
            taking.add_done_callback(self._let_go)
            raise

    def _let_go(self, taking: asyncio.Future[Lease | None]) -> None:
        if taking.cancelled() or taking.exception() is not None:
            return
        lease = taking.result()
        if lease is not None:
            release = asyncio.ensure_future(lease.release())
            self._letting_go.add(release)
            release.add_done_callback(self._letting_go.discard)

    async def run_owned(self, key: str, work: Callable[[], Awaitable[T]]) -> T | None:
        """Run `work` while holding the lease of `key`; None (without running it) if another
        owner holds it. If the lease is lost meanwhile, `work` is cancelled and `LeaseLost`
        raised: another owner may already be doing the same work."""
        lease = await self._taken(key)
        if lease is None:
            return None
        task = asyncio.ensure_future(work())
        keeper = asyncio.create_task(lease.keep())
        try:
            done, _ = await asyncio.wait({task, keeper}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            # The keeper ended first: the lease is lost (keep() only ends by raising).
            await cancel_and_wait([task])
            keeper.result()
            raise LeaseLost(key)
        finally:
            # Bounded: on Python 3.11 a cancel can be swallowed by a request in flight.
            await cancel_and_wait([task, keeper])
            await asyncio.shield(lease.release())
