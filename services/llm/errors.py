"""What can go wrong calling a model: one error type with a `kind`, and subclasses by cause.

Every failure of `Provider.complete` is a `ModelError`; its `kind` names what happened (the
runtime records it as the `run.error` kind) and `retryable` whether the same request may
succeed later. Only transient kinds are retryable: `timeout`, `connection`, `http_5xx`,
`rate_limited` (and 408/409), `truncated_stream`, `stream_error`.
"""

from __future__ import annotations

from typing import Literal

ModelErrorKind = Literal[
    "model_error",  # unclassified (e.g. replayed from a record that kept no kind)
    "config",  # no usable provider configuration
    "bad_request",  # the request cannot be sent as it is
    "timeout",  # no answer, or no next chunk, within the configured timeout
    "connection",  # the provider could not be reached
    "http_4xx",  # the provider refused the request (400, 401, 404, …)
    "rate_limited",  # HTTP 429
    "http_5xx",  # the provider failed (500, 502, 503, …)
    "truncated_stream",  # the answer stopped before its end (no finish_reason, dropped)
    "stream_error",  # the stream reported an error event
    "malformed_response",  # bytes that are not JSON, or not JSON at all (HTML, text)
    "not_openai_json",  # JSON, but not a chat completion (chunk)
    "invalid_tool_call",  # tool calls that cannot be answered (duplicate ids, no name)
    "answer_too_large",  # more than the configured answer size
    "budget_exceeded",  # refused before the call: a spend budget would be passed
]

RETRYABLE_STATUSES = frozenset({408, 409, 429})


class ModelError(Exception):
    """A model call failed. `kind` says what happened, `retryable` whether the same request
    may succeed later, `attempts` how many tries were made."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        kind: ModelErrorKind = "model_error",
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ModelErrorKind = kind
        self.retryable = retryable
        self.status = status
        self.attempts = 1


class ModelRequestError(ModelError):
    """The request cannot be sent as it is (unknown provider prefix, malformed message)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False, kind="bad_request")


class ModelConfigError(ModelError):
    """No usable provider configuration."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False, kind="config")


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def status_kind(status: int) -> ModelErrorKind:
    if status >= 500:
        return "http_5xx"
    return "rate_limited" if status == 429 else "http_4xx"


class ModelStatusError(ModelError):
    """The provider answered with an HTTP error status."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        if retryable is None:
            retryable = is_retryable_status(status)
        advice = "transient, worth retrying" if retryable else "not retryable: fix the request"
        super().__init__(
            f"model provider answered HTTP {status} ({advice}): {detail}",
            retryable=retryable,
            kind=status_kind(status),
            status=status,
        )
        self.retry_after = retry_after


class ModelConnectionError(ModelError):
    """The provider could not be reached, or did not answer in time."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message, retryable=True, kind="timeout" if timeout else "connection")
        self.timeout = timeout


class ModelStreamError(ModelError):
    """The answer stream broke, reported an error, or ended incomplete.

    `partial` is true when text had already been delivered to `on_delta`: the caller must
    re-run the step (and discard what it showed) rather than expect the adapter to retry.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ModelErrorKind = "truncated_stream",
        status: int | None = None,
        partial: bool = False,
    ) -> None:
        super().__init__(message, retryable=True, kind=kind, status=status)
        self.partial = partial


class ModelResponseError(ModelError):
    """The provider answered something that is not a usable chat completion: not JSON, not
    OpenAI's shape, unusable tool calls, or too large. Retrying would not help."""

    def __init__(self, message: str, *, kind: ModelErrorKind) -> None:
        super().__init__(message, retryable=False, kind=kind)
