"""Every tenant's thread events of some types as they are published, on core NATS: what a
process observes (latencies, fair shares) while it runs, at most once, from now on. Not the
log: a message missed while nothing listens stays missed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from agency.contracts.partitions import live_filters
from agency.infra.jetstream.decoding import event_type_of


@contextlib.asynccontextmanager
async def subscribed(
    nc: NATS, subjects: Iterable[str], on_message: Callable[[Msg], Awaitable[None]]
) -> AsyncIterator[None]:
    """While inside, hand `on_message` each message published on `subjects`."""
    subs = [await nc.subscribe(s, cb=on_message) for s in subjects]
    try:
        yield
    finally:
        for sub in subs:
            with contextlib.suppress(NatsError):
                await sub.unsubscribe()


@contextlib.asynccontextmanager
async def thread_events_live(
    nc: NATS, types: Iterable[str], observe: Callable[[bytes], None]
) -> AsyncIterator[None]:
    """While inside, hand `observe` the bytes of each thread event of one of `types`
    (`run.started`, ...), told by its type header without decoding the others."""
    wanted = frozenset(types)

    async def on_message(msg: Msg) -> None:
        if event_type_of(msg) in wanted:
            observe(msg.data)

    async with subscribed(nc, live_filters("thread"), on_message):
        yield
