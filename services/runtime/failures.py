"""What the runtime does when driving a thread fails: retry, or end the run with a reason.

A failure is transient when it is an outage (`infra/outage.py`): the broker or the
database did not answer in time, the connection is being re-established, or this worker
lost its lease on the thread. It is raised, and the trigger's worker waits the outage out
and drives the thread again, without using up an attempt. Everything else (a middleware
or tool hook raising, an event that breaks its contract or does not fit in a message, a
decision of too many events, a loop that never settles) would fail the same way again:
the run ends with `run.error`, its kind and message saying what happened, and its open
tool calls are answered so the history stays a valid conversation for the next run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from agency.contracts.events import (
    AgentError,
    AnyEvent,
    ChatMessage,
    MessageAppended,
    RunError,
    RunStarted,
)
from agency.contracts.limits import limits, truncate_text
from agency.domain.run_cancel import tool_message
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.errors import BatchTooLarge, EventTooLarge, InvalidEvent
from agency.infra.outage import is_outage
from agency.services.agents.middleware import Middleware
from agency.services.agents.tracebacks import describe as exception_text, where
from agency.services.egress import EgressRefused
from agency.services.runtime.actions import DEFAULT_MAX_STEPS

_MAX_ERROR_CHARS = 2000


class LoopDidNotSettle(Exception):
    def __init__(self, thread_id: str, iterations: int) -> None:
        super().__init__(
            f"thread {thread_id}: the loop took {iterations} decisions without waiting; "
            "a middleware or tool keeps producing work"
        )


class MiddlewareFailed(Exception):
    """A middleware's hook raised `error`; the message says which, where and what."""

    def __init__(self, middleware: Middleware, hook: str, error: Exception) -> None:
        self.middleware = middleware.name
        self.hook = f"{type(middleware).__name__}.{hook}"
        self.raised_at = where(error)
        at = f" at {self.raised_at}" if self.raised_at else ""
        super().__init__(
            f"middleware {self.middleware!r} ({self.hook}) raised{at}: {exception_text(error)}"
        )

    def log_fields(self) -> dict[str, Any]:
        return {"middleware": self.middleware, "hook": self.hook, "raised_at": self.raised_at}


class MiddlewareUnavailable(MiddlewareFailed):
    """A middleware's hook raised what a later try may not (a timeout, a refused
    connection: a service of the app's own did not answer). Never an outage of ours: the
    trigger is delivered again, and each delivery counts against the run's attempts."""


@contextmanager
def hook(middleware: Middleware, name: str) -> Iterator[None]:
    """Run a hook of `middleware` inside: what it raises becomes `MiddlewareFailed`, or
    `MiddlewareUnavailable` when it looks transient. A hook has no broker of ours to wait
    for (it acts through `ctx`), so nothing it raises is waited out as an outage."""
    try:
        yield
    except Exception as e:
        if is_outage(e):
            raise MiddlewareUnavailable(middleware, name, e) from e
        raise MiddlewareFailed(middleware, name, e) from e


def is_retried(error: BaseException) -> bool:
    """Whether a drive that failed with `error` is left to the trigger's next delivery
    rather than ending the run: an outage (waited out, costing no attempt), or a hook that
    may answer later (costing one)."""
    return is_transient(error) or isinstance(error, MiddlewareUnavailable)


def is_transient(error: BaseException) -> bool:
    """An outage, not the run's failure: the same drive later may succeed."""
    return is_outage(error)


def failure_kind(error: BaseException) -> str:
    """A stable, machine-readable name for what went wrong."""
    match error:
        case EventTooLarge():
            return "event_too_large"
        case BatchTooLarge():
            return "too_many_events"
        case InvalidEvent():
            return "invalid_event"
        case LoopDidNotSettle():
            return "loop_did_not_settle"
        case EgressRefused():
            return "egress_refused"
        case _:
            return "internal_error"


def describe(error: BaseException) -> str:
    text = str(error) if isinstance(error, MiddlewareFailed) else f"{type(error).__name__}: {error}"
    return text if len(text) <= _MAX_ERROR_CHARS else text[:_MAX_ERROR_CHARS] + "…"


def run_failed(
    state: ThreadState, kind: str, error: str, *, run_id: str | None = None
) -> tuple[AnyEvent, ...]:
    """The events that end the thread's run with `error`: the active run, or else the
    queued request at the head (which failed to start, so would fail again). Nothing when
    the thread has no run to end, or when `run_id` is given and is not that run."""
    run = state.active_run
    if run is not None and not run.terminal:
        if run_id is not None and run.run_id != run_id:
            return ()
        answers = tuple(
            MessageAppended(run_id=run.run_id, message=tool_message(call, f"Not run: {error}"))
            for call in state.open_tool_calls()
        )
        return (
            *answers,
            AgentError(run_id=run.run_id, error=error, retryable=False),
            RunError(run_id=run.run_id, error=error, kind=kind),
        )
    if state.queue:
        head = state.queue[0]
        if run_id is not None and head.run_id != run_id:
            return ()
        return (
            RunStarted(
                run_id=head.run_id, agent_type=state.agent_type, max_steps=DEFAULT_MAX_STEPS
            ),
            RunError(run_id=head.run_id, error=error, kind=kind),
        )
    return ()


def fit_text(text: str) -> str:
    """A model's reasoning cut to `max_message_bytes` with a visible marker."""
    limit = limits().max_message_bytes
    if len(text) * 4 <= limit or len(text.encode()) <= limit:
        return text
    return truncate_text(text, limit)


class StreamRoom:
    """What is left of `max_message_bytes` for a model call's streamed text: text past the
    answer limit is not streamed either (characters: at most as many)."""

    def __init__(self) -> None:
        self._left = limits().max_message_bytes

    def take(self, text: str) -> str:
        """As much of `text` as there is room left for."""
        text = text[: self._left]
        self._left -= len(text)
        return text


def fit_message(message: ChatMessage) -> ChatMessage:
    """A model answer whose text is longer than an event should carry (`max_message_bytes`;
    it is stored twice in one append, in `model.completed` and the assistant's message),
    cut with a visible marker. Tool call arguments are left whole (a cut would break their
    JSON): an answer that still does not fit ends the run as `event_too_large`."""
    limit = limits().max_message_bytes
    if len(message.content) * 4 <= limit or len(message.content.encode()) <= limit:
        return message
    return msgspec.structs.replace(message, content=truncate_text(message.content, limit))
