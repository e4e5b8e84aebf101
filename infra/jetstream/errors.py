"""Errors of the JetStream layer. Driver errors are translated here, at the boundary."""

from __future__ import annotations

import nats.errors
import nats.js.errors

from agency.contracts.errors import StructuredError


class StoreError(StructuredError, init=False):
    """Base of every event store and command bus error."""


class ConcurrencyError(StoreError):
    """Another writer appended to the aggregate first; reload it and decide again."""

    aggregate_subject: str
    expected_stream_seq: int
    actual_stream_seq: int | None

    def describe(self) -> str:
        actual = self.actual_stream_seq
        return (
            f"concurrent append to {self.aggregate_subject}: expected last stream sequence "
            f"{self.expected_stream_seq}, actual "
            f"{'unknown (another append in flight)' if actual is None else actual}; "
            "reload the aggregate and retry"
        )


class AppendError(StoreError):
    """The server refused an append for a reason other than concurrency."""

    subject: str
    code: int | None
    description: str
    message = "append to {subject} refused (error {code}): {description}"


class InvalidEvent(StoreError):
    """An event breaks its contract (a reader could not decode it); it was not appended."""

    event_type: str
    field: str
    problem: str

    def describe(self) -> str:
        where = f" at {self.field}" if self.field else ""
        return (
            f"event {self.event_type!r} breaks its contract{where}: {self.problem}; "
            "nothing was appended"
        )


class BatchTooLarge(StoreError):
    size: int
    limit: int
    message = (
        "a batch of {size} events exceeds the atomic batch limit of {limit}; "
        "split the decision into smaller ones"
    )


class StoreTimeout(StoreError):
    operation: str
    seconds: float
    message = "{operation} did not complete within {seconds:g} s"


class EventTooLarge(StoreError):
    """An event would not fit in one message of the stream; nothing was appended."""

    event_type: str
    size: int
    limit: int
    message = (
        "a {event_type} event of {size} bytes exceeds the {limit} bytes one event can hold; "
        "truncate or split what it carries"
    )


# Errors that say nothing about the request, only that the server or the connection could
# not answer it now: a lost node, a leader election, a reconnect.
_TRANSIENT_NATS = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.SlowConsumerError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.ServerError,
    StoreTimeout,
    TimeoutError,
    OSError,
)


_TRANSIENT_API_CODES = frozenset({10005})  # no suitable peers for placement


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the same NATS operation later may succeed."""
    if isinstance(exc, _TRANSIENT_NATS):
        return True
    # A JetStream API error without a status, or one of the 5xx family, is the cluster's;
    # so is "no suitable peers for placement" while a node is down or not yet known.
    # The key-value errors subclass APIError without calling its constructor: a missing
    # key or a wrong revision carries no `code` at all and is an answer, not an outage.
    if not isinstance(exc, nats.js.errors.APIError) or isinstance(
        exc, nats.js.errors.KeyValueError
    ):
        return False
    code = getattr(exc, "code", None)
    return code is None or code >= 500 or getattr(exc, "err_code", None) in _TRANSIENT_API_CODES
