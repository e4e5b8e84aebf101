"""Model calls in flight stopped by a cancel: every runtime worker listens to `run.canceled`
on plain NATS and aborts the call it has in flight for that thread, if any."""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from nats.aio.msg import Msg

from agency.contracts.subjects import notes_filter, tenant_of
from agency.infra.jetstream.connection import Bus
from agency.services.runtime import commands
from agency.services.runtime.loop import ThreadDriver

log = structlog.get_logger(__name__)


async def listen_for_cancels(bus: Bus, driver: ThreadDriver, stop: asyncio.Event) -> None:
    """Abort `driver`'s model call of each thread whose run is canceled, until `stop`."""

    async def on_cancel(msg: Msg) -> None:
        tenant = tenant_of(msg.subject)
        thread = commands.canceled_thread(tenant, msg.data)
        if thread is None:
            return  # a queued request's: the active run's call goes on
        if driver.abort_model_call(tenant, thread):
            log.info("model call aborted by cancel", tenant_id=tenant, thread_id=thread)

    sub = await bus.nc.subscribe(notes_filter("run.canceled"), cb=on_cancel)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
