"""Every tenant's thread events of some types as they are published, on core NATS: what a
process observes (latencies, fair shares) while it runs, at most once, from now on. Not the
log: a message missed while nothing listens stays missed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError


@contextlib.asynccontextmanager
async def thread_events_live(
    nc: NATS, types: Iterable[str], observe: Callable[[bytes], None]
) -> AsyncIterator[None]:
    """While inside, hand `observe` the bytes of each thread event whose subject ends in one
    of `types` (subject tokens: `run_started`, ...)."""

    async def on_message(msg: Msg) -> None:
        observe(msg.data)

    subs = [await nc.subscribe(f"tenant.*.evt.thread.*.{token}", cb=on_message) for token in types]
    try:
        yield
    finally:
        for sub in subs:
            with contextlib.suppress(NatsError):
                await sub.unsubscribe()
