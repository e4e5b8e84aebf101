"""Stopping tool calls whose run is canceled.

Every tools-service process listens to `run.canceled` notes on plain NATS (like the runtime's
abort of a model call in flight) and cancels the execution of each call of that run it is
running: an async tool gets `CancelledError` where it awaits; a blocking tool on a thread
cannot be stopped by Python, but its result is dropped. The call's result is never
appended: the runtime answered the call when it canceled the run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

import msgspec
import nats.errors
import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from agency.contracts.codec import decode_event
from agency.contracts.errors import ContractError
from agency.contracts.events import RunCanceled
from agency.contracts.subjects import notes_filter, tenant_of
from agency.infra.jetstream.connection import Bus

log = structlog.get_logger(__name__)

T = TypeVar("T")
RunKey = tuple[str, str, str]  # tenant, thread, run id


class RunCanceledWhileRunning(Exception):
    """The call's run was canceled while the call ran; its execution was stopped."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id} was canceled while the call ran")


class RunCancels:
    """Executions by run, and the `run.canceled` listener that stops them."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._running: dict[RunKey, set[asyncio.Task[object]]] = {}
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._sub = await self._bus.nc.subscribe(notes_filter("run.canceled"), cb=self._on_cancel)

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await asyncio.wait_for(sub.unsubscribe(), timeout=2.0)

    async def run(self, key: RunKey, work: Awaitable[T]) -> T:
        """`await work`, stopped by a cancel of its run: `RunCanceledWhileRunning` then.

        A cancellation of the caller itself (shutdown) still propagates as `CancelledError`.
        """
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        tasks = self._running.setdefault(key, set())
        tasks.add(task)
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait([task])
            raise
        finally:
            tasks.discard(task)
            if not tasks:
                self._running.pop(key, None)
        if task.cancelled():
            raise RunCanceledWhileRunning(key[2])
        return task.result()

    def cancel(self, key: RunKey) -> int:
        """Cancel the executions of one run in this process; how many there were."""
        tasks = self._running.get(key, set())
        for task in tasks:
            task.cancel()
        return len(tasks)

    async def _on_cancel(self, msg: Msg) -> None:
        # A note (`tenant.<t>.note.run_canceled`) carries the event; the subject's tenant is
        # what the broker confines, so an envelope naming another is not believed.
        try:
            env = decode_event(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError, ContractError):
            return
        if not isinstance(env.payload, RunCanceled) or env.tenant_id != tenant_of(msg.subject):
            return
        key = (env.tenant_id, env.aggregate_id, env.payload.run_id)
        if self.cancel(key):
            log.info("tool calls stopped by cancel", tenant_id=key[0], thread_id=key[1],
                     run_id=key[2])  # fmt: skip
