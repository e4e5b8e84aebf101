"""Errors of the JetStream layer. Driver errors are translated here, at the boundary."""

from __future__ import annotations

import nats.errors
import nats.js.errors


class StoreError(Exception):
    """Base of every event store and command bus error."""


class ConcurrencyError(StoreError):
    """Another writer appended to the aggregate first; reload it and decide again."""

    def __init__(
        self, aggregate_subject: str, expected_stream_seq: int, actual_stream_seq: int | None
    ) -> None:
        self.aggregate_subject = aggregate_subject
        self.expected_stream_seq = expected_stream_seq
        self.actual_stream_seq = actual_stream_seq
        actual = (
            "unknown (another append in flight)"
            if actual_stream_seq is None
            else (str(actual_stream_seq))
        )
        super().__init__(
            f"concurrent append to {aggregate_subject}: expected last stream sequence "
            f"{expected_stream_seq}, actual {actual}; reload the aggregate and retry"
        )


class AppendError(StoreError):
    """The server refused an append for a reason other than concurrency."""

    def __init__(self, subject: str, code: int | None, description: str) -> None:
        self.subject = subject
        self.code = code
        self.description = description
        super().__init__(f"append to {subject} refused (error {code}): {description}")


class InvalidEvent(StoreError):
    """An event breaks its contract (a reader could not decode it); it was not appended."""

    def __init__(self, event_type: str, field: str, problem: str) -> None:
        self.event_type = event_type
        self.field = field
        self.problem = problem
        where = f" at {field}" if field else ""
        super().__init__(
            f"event {event_type!r} breaks its contract{where}: {problem}; nothing was appended"
        )


class BatchTooLarge(StoreError):
    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"a batch of {size} events exceeds the atomic batch limit of {limit}; "
            "split the decision into smaller ones"
        )


class StoreTimeout(StoreError):
    def __init__(self, operation: str, seconds: float) -> None:
        self.operation = operation
        self.seconds = seconds
        super().__init__(f"{operation} did not complete within {seconds:g} s")


class EventTooLarge(StoreError):
    """An event would not fit in one message of the stream; nothing was appended."""

    def __init__(self, event_type: str, size: int, limit: int) -> None:
        self.event_type = event_type
        self.size = size
        self.limit = limit
        super().__init__(
            f"a {event_type} event of {size} bytes exceeds the {limit} bytes one event can "
            "hold; truncate or split what it carries"
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
