"""Errors of the JetStream layer. Driver errors are translated here, at the boundary."""

from __future__ import annotations


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
