"""How a consumer worker settles a message: ack, nak, term and in_progress retried under
the shared policy, a rejected message dead-lettered (its hook run first), and a message
being worked on heartbeated so a long handler is not redelivered."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog
from nats.aio.msg import Msg

from agency.infra.jetstream.deadletter import DeadLetter, DeadLetters
from agency.infra.jetstream.errors import is_transient
from agency.infra.jetstream.outcomes import Ack, Outcome, Reject, Retry, describe
from agency.infra.jetstream.worker_tuning import WorkerRetry

log = structlog.get_logger(__name__)

T = TypeVar("T")

DeadLetterHook = Callable[[T, str, str], Awaitable[None]]


def _settle_failure(exc: Exception) -> bool:
    return is_transient(exc)


def _any_failure(exc: Exception) -> bool:
    return True


@dataclass(frozen=True)
class Settling(Generic[T]):
    """The settling of one durable's messages."""

    durable: str
    dead_letters: DeadLetters
    ack_wait: float
    backoff: tuple[float, ...]
    retry: WorkerRetry
    on_dead_letter: DeadLetterHook[T] | None

    async def settle(self, msg: Msg, outcome: Outcome[T], source_stream: str | None) -> None:
        """Settle `msg` as `outcome` says; a rejected one is dead-lettered as taken from
        `source_stream` (None: the stream the message names, on a log of several)."""
        match outcome:
            case Ack():
                await self.signal("ack", msg.ack)
            case Retry(delay=delay):
                await self.signal("nak", lambda: msg.nak(delay=max(delay, 0.01)))
            case Reject() as reject:
                await self._reject(msg, reject, source_stream)

    async def _reject(self, msg: Msg, reject: Reject[T], source_stream: str | None) -> None:
        if reject.item is not None and self.on_dead_letter is not None:
            await self._run_hook(reject.item, reject.reason, reject.detail)
        meta = msg.metadata
        letter = DeadLetter(
            source_stream=source_stream or meta.stream,
            subject=msg.subject,
            stream_seq=meta.sequence.stream,
            reason=reject.reason,
            detail=reject.detail,
            data=msg.data,
            consumer=self.durable,
            deliveries=meta.num_delivered,
        )
        try:
            await self.retry.settle.call(_settle_failure, self.dead_letters.put, letter)
        except Exception as e:
            # Not stored: the message must not be settled. Handed back, it is dead-lettered
            # on its next delivery (the broker allows one more than `max_deliver`).
            log.error(
                "could not dead-letter, handing the message back",
                durable=self.durable,
                reason=reject.reason,
                error=describe(e),
            )
            await self.signal("nak", lambda: msg.nak(delay=self.backoff[-1]))
            return
        await self.signal(reject.settle, msg.term if reject.settle == "term" else msg.ack)

    async def _run_hook(self, item: T, reason: str, detail: str) -> None:
        hook = self.on_dead_letter
        assert hook is not None
        try:
            await self.retry.hook.call(_any_failure, hook, item, reason, detail)
        except Exception as e:  # the message is dead-lettered anyway: it says what failed
            log.error(
                "dead-letter hook failed",
                durable=self.durable,
                reason=reason,
                error=describe(e),
            )

    async def signal(self, what: str, operation: Callable[[], Awaitable[None]]) -> None:
        """Ack, nak, term or in_progress, retried; a failure is logged and left to the
        broker, which redelivers an unsettled message after the ack wait."""
        try:
            await self.retry.settle.call(_settle_failure, operation)
        except Exception as e:
            error = describe(e)
            log.error(f"could not {what} a message", durable=self.durable, error=error)

    @contextlib.asynccontextmanager
    async def heartbeat(self, msg: Msg) -> AsyncIterator[None]:
        """Tell the broker the message is being worked on, so a long handler is not
        redelivered meanwhile: every `ack_wait / 3` seconds until the body ends.

        A timer, not a task: most handlers end long before the first beat, and a timer
        costs a quarter of a task started and cancelled (one per message handled)."""
        loop = asyncio.get_running_loop()
        every = self.ack_wait / 3
        beats: set[asyncio.Task[None]] = set()
        timer: asyncio.TimerHandle

        def beat() -> None:
            nonlocal timer
            task = loop.create_task(self.signal("heartbeat", msg.in_progress))
            beats.add(task)
            task.add_done_callback(beats.discard)
            timer = loop.call_later(every, beat)

        timer = loop.call_later(every, beat)
        try:
            yield
        finally:
            timer.cancel()
            for task in beats:
                task.cancel()
            if beats:
                # `wait`, not `await`: a cancellation of our own caller must still propagate.
                await asyncio.wait(set(beats))
