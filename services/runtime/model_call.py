"""One model step's call, made while the step's opening events are being stored.

A step opens with an append (`run.tick`, `model.started`, ...) and then asks the model.
The request does not depend on that append, so both go out at once: the model's time to
answer hides the append's round trip and fsync. What the model streams waits for the
opening to be stored before it is appended, so the log's order is the same as if the
calls had been made one after the other; an opening that did not land (another writer
moved the thread) abandons the call.

The opening may be held back a moment (`Opening`, `hold`): a model that answers whole
within it (a small answer from a fast model) has its answer appended with the opening,
one atomic append where there were two. The first streamed text, or the hold running out,
sends the opening on as before.

A cancel aborts the call in flight (`abort`); a stream cut mid-answer is made again
(`_STREAM_RERUNS`), its shown deltas superseded by the new call's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import structlog
from opentelemetry import trace

from agency.contracts.events import AnyEvent, ModelDelta
from agency.domain.thread_state import ThreadState
from agency.services.llm.errors import ModelStreamError
from agency.services.llm.provider import ModelRequest, ModelResponse, Provider
from agency.services.runtime.failures import StreamRoom

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)

# A step whose answer stream is cut mid-way (after text was shown) is made again this
# many times in all before the run ends with the error.
_STREAM_RERUNS = 3

# Appends after a state: the stored state, and whether the events landed.
Append = Callable[[ThreadState, Sequence[AnyEvent]], Awaitable[tuple[ThreadState, bool]]]
Appended = tuple[ThreadState, bool]


class Opening:
    """The step's opening append, sent once `release`d or after `hold` seconds, unless
    `withdraw`n first (its events then go with the next append)."""

    def __init__(self, append: Callable[[], Awaitable[Appended]], hold: float) -> None:
        self._append = append
        self._released = asyncio.Event()
        self._begun = False
        self.future: asyncio.Future[Appended] = asyncio.ensure_future(self._send(hold))

    async def _send(self, hold: float) -> Appended:
        if hold > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), hold)
        self._begun = True
        return await self._append()

    def release(self) -> None:
        """Send it now."""
        self._released.set()

    def withdraw(self) -> bool:
        """Keep it from being sent: False once its append has begun."""
        if self._begun:
            return False
        self.future.cancel()
        return True


class ModelAborted(Exception):
    """The model call was abandoned: the run was canceled meanwhile, or the step's
    opening events were not stored."""


class ModelCalls:
    """The model calls in flight, one per thread at most."""

    def __init__(self, provider: Provider, append: Append) -> None:
        self._provider = provider
        self._append = append
        self._inflight: dict[tuple[str, str], asyncio.Task[ModelResponse]] = {}

    def abort(self, tenant_id: str, thread_id: str) -> bool:
        """Abort the thread's model call in flight, if there is one."""
        task = self._inflight.get((tenant_id, thread_id))
        if task is None or task.done():
            return False
        task.cancel()
        return True

    async def call(
        self, opening: Opening, key: tuple[str, str], request: ModelRequest, run_id: str, step: int
    ) -> tuple[ModelResponse, ThreadState | None]:
        """The model's answer and the thread's state after the deltas it streamed (None
        without any: the opening's, which may not be sent yet). Raises `ModelAborted` when
        the opening did not land or the run stopped running; `ModelError` as the provider
        does."""
        for rerun in range(1, _STREAM_RERUNS + 1):
            try:
                return await self._call(opening, key, request, run_id, step)
            except ModelStreamError as e:
                if not (e.partial and e.retryable) or rerun == _STREAM_RERUNS:
                    raise
                log.warning("model stream cut mid-answer; the step is made again", error=str(e))
        raise AssertionError("unreachable")

    async def _call(
        self, opening: Opening, key: tuple[str, str], request: ModelRequest, run_id: str, step: int
    ) -> tuple[ModelResponse, ThreadState | None]:
        latest: list[ThreadState] = []
        room = StreamRoom()

        async def on_delta(text: str) -> None:
            text = room.take(text)
            if not text:
                return
            current = latest[-1] if latest else await opened(opening)
            updated, _ = await self._append(
                current, [ModelDelta(run_id=run_id, step=step, delta=text)]
            )
            run = updated.run(run_id)
            if run is None or run.status != "running":
                raise ModelAborted()
            latest.append(updated)

        with (
            structlog.contextvars.bound_contextvars(run_id=run_id, step=step),
            tracer.start_as_current_span(
                f"model {request.model}", kind=trace.SpanKind.CLIENT
            ) as span,
        ):
            span.set_attribute("agency.run_id", run_id)
            span.set_attribute("agency.step", step)
            # The tenant's own provider settings, if it has any, serve its call.
            request = replace(request, tenant=key[0])
            task = asyncio.ensure_future(self._provider.complete(request, on_delta))
            self._inflight[key] = task
            try:
                response = await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                raise ModelAborted() from None
            finally:
                if self._inflight.get(key) is task:
                    del self._inflight[key]
                if not task.done():  # this drive was cancelled (shutdown, or its lease lost)
                    task.cancel()
        return response, latest[-1] if latest else None


async def opened(opening: Opening) -> ThreadState:
    """The state once the step's opening is stored (sent now if it was held);
    `ModelAborted` if it was not. The opening is shielded: abandoning the model call never
    abandons the append."""
    opening.release()
    state, stored = await asyncio.shield(opening.future)
    if not stored:
        raise ModelAborted()
    return state


def answered_whole(calling: asyncio.Future[tuple[ModelResponse, ThreadState | None]]) -> bool:
    """The call is done with an answer, none of it streamed (streaming sent the opening)."""
    return calling.done() and not calling.cancelled() and calling.exception() is None


async def discard(task: asyncio.Future[tuple[ModelResponse, ThreadState | None]]) -> None:
    """Cancel a call that is no longer wanted and wait for it to unwind (a cancel of the
    caller itself still propagates)."""
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved: whatever it raised is moot now
