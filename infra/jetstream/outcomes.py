"""What a consumer's handler says of a message (`Ack`, `Retry`, `Reject`), `Undecodable` for
one it cannot read and `Erased` for one of a deleted thread: the answers `ConsumerWorker`
(`worker.py`) settles messages by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from agency.contracts.errors import StructuredError

T = TypeVar("T")


class Undecodable(StructuredError):
    """The message is not what this consumer reads: dead-letter it at once."""

    reason: str
    message = "{reason}"


class Erased(Exception):
    """The message is an event of a deleted thread (its key destroyed): acknowledged, as
    there is nothing left to act on."""


@dataclass(frozen=True, slots=True)
class Ack:
    """Handled: acknowledge."""


@dataclass(frozen=True, slots=True)
class Retry:
    """Not now: hand it back, to be delivered again in `delay` seconds."""

    delay: float


@dataclass(frozen=True, slots=True)
class Reject(Generic[T]):
    """Never: dead-letter it with `reason`, then settle it with `settle`. `item` (what the
    message decoded to) is handed to the dead-letter hook; None skips the hook."""

    reason: str
    detail: str
    item: T | None = None
    settle: Literal["term", "ack"] = "term"


Outcome = Ack | Retry | Reject[T]


def describe(error: BaseException) -> str:
    """`ExcType: message`, as a log line or a dead letter's detail names an error."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
