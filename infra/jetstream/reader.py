"""Ordered reading of the events stream: backfill from a stream sequence, then live.

An ordered push consumer: the client library recreates it from the last delivered
sequence when it detects a gap or the server loses it, and flow control keeps the server
from running ahead of us. Readers see every matching event once, in stream order. (Pull
fetches with explicit batches were measured at a third of this rate.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.jetstream.decoding import record_from_js_msg, stream_seq_of
from agency.infra.jetstream.records import RecordedEvent, UndecodableEvent

log = structlog.get_logger(__name__)

Delivered = RecordedEvent | UndecodableEvent


class OrderedReader:
    """Async context manager; `next_batch()` returns what has arrived, in order."""

    def __init__(
        self,
        js: JetStreamContext,
        filter_subject: str | Sequence[str],
        *,
        start_seq: int = 1,
        batch: int = 1000,
        stream: str = EVENTS_STREAM,
    ) -> None:
        self._js = js
        # One subject, or several (the consumer's `filter_subjects`): still one order.
        self._filters: list[str] = (
            [filter_subject] if isinstance(filter_subject, str) else list(filter_subject)
        )
        self._filter = ", ".join(self._filters)
        self._next_seq = max(start_seq, 1)
        self._batch = batch
        self._stream = stream
        self._sub: JetStreamContext.PushSubscription | None = None
        self._buffer: list[Msg] = []
        self._arrived = asyncio.Event()
        self._drained = asyncio.Event()
        # Beyond this many undelivered messages the callback waits, the client's pending
        # queue fills and flow control holds the server back.
        self._max_buffer = batch * 4

    @property
    def next_seq(self) -> int:
        """The stream sequence the next delivered event will have at least."""
        return self._next_seq

    async def __aenter__(self) -> OrderedReader:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self._next_seq,
            inactive_threshold=30.0,
            filter_subjects=self._filters if len(self._filters) > 1 else None,
        )
        self._sub = await self._js.subscribe(
            self._filters[0],
            stream=self._stream,
            cb=self._on_message,
            ordered_consumer=True,
            config=config,
        )

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await asyncio.wait_for(sub.unsubscribe(), timeout=2.0)
            except (TimeoutError, NatsError):
                log.debug("reader unsubscribe did not complete", filter=self._filter)

    async def _on_message(self, msg: Msg) -> None:
        while len(self._buffer) >= self._max_buffer:
            self._drained.clear()
            await self._drained.wait()
        self._buffer.append(msg)
        self._arrived.set()

    async def next_batch(self, timeout: float = 1.0) -> list[Delivered]:
        """Events from the next sequence on; an empty list when none arrived in `timeout`."""
        if self._sub is None:
            await self.open()
        if not self._buffer:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout)
            except TimeoutError:
                return []
        taken, self._buffer = self._buffer[: self._batch], self._buffer[self._batch :]
        self._drained.set()
        out: list[Delivered] = []
        for msg in taken:
            stream_seq = stream_seq_of(msg)
            if stream_seq < self._next_seq:
                continue  # a consumer reset redelivered what we already handed out
            self._next_seq = stream_seq + 1
            out.append(record_from_js_msg(msg, stream_seq))
        return out
