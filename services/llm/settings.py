"""How the model adapter behaves: timeouts, retries, limits. Read from the environment by
`ModelSettings.from_env`; tests build them directly."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar

import msgspec


class ModelSettings(msgspec.Struct, frozen=True, kw_only=True):
    """`timeout` bounds connecting and every read: the first byte of the answer and each
    next chunk (a model that hangs, or stalls mid-stream, fails with kind `timeout`).
    `max_attempts` bounds tries per call for transient failures; waits between them start
    near `backoff_initial` seconds and double up to `backoff_max` (a `retry-after` from the
    provider is honoured up to `backoff_max`). `max_answer_bytes` bounds an answer's text
    and tool arguments (beyond it the call fails with kind `answer_too_large`);
    `coalesce_ms` is how often streamed text is handed on, in pieces of at most
    `max_delta_bytes`. `idle_connections` bounds the idle connections kept to the provider
    (`docs/internals/runtime.md`, "Model calls")."""

    timeout: float = 120.0
    connect_timeout: float = 10.0
    max_attempts: int = 4
    backoff_initial: float = 0.5
    backoff_max: float = 20.0
    max_answer_bytes: int = 8 * 1024 * 1024
    coalesce_ms: int = 50
    max_delta_bytes: int = 64 * 1024
    idle_connections: int = 16

    def __post_init__(self) -> None:
        if self.timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError(f"model timeouts must be positive, got {self.timeout}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.backoff_initial < 0 or self.backoff_max < self.backoff_initial:
            raise ValueError(
                f"backoff must satisfy 0 <= initial <= max, got {self.backoff_initial} "
                f"and {self.backoff_max}"
            )
        if self.idle_connections < 0:
            raise ValueError(f"idle_connections must not be negative, got {self.idle_connections}")
        if self.max_answer_bytes < 1 or self.max_delta_bytes < 1 or self.coalesce_ms < 0:
            raise ValueError("answer and delta limits must be positive, coalesce_ms not negative")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ModelSettings:
        """`AGENCY_MODEL_TIMEOUT`, `AGENCY_MODEL_MAX_ATTEMPTS`, `AGENCY_MODEL_MAX_ANSWER_BYTES`,
        `AGENCY_MODEL_IDLE_CONNECTIONS` over the defaults; a value that is not a number is
        refused with its name."""
        source = os.environ if env is None else env
        defaults = cls()
        return cls(
            timeout=_number(source, "AGENCY_MODEL_TIMEOUT", defaults.timeout, float),
            max_attempts=_number(source, "AGENCY_MODEL_MAX_ATTEMPTS", defaults.max_attempts, int),
            max_answer_bytes=_number(
                source, "AGENCY_MODEL_MAX_ANSWER_BYTES", defaults.max_answer_bytes, int
            ),
            idle_connections=_number(
                source, "AGENCY_MODEL_IDLE_CONNECTIONS", defaults.idle_connections, int
            ),
        )


N = TypeVar("N", int, float)


def _number(env: Mapping[str, str], name: str, default: N, kind: type[N]) -> N:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a valid {kind.__name__}") from None
