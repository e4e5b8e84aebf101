"""Errors raised while building or reading wire messages, and the base of every error that
carries what it is about (`StructuredError`)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ClassVar, dataclass_transform


@dataclass_transform(eq_default=False)
class StructuredError(Exception):
    """An error that carries what it is about as fields and says it in its message.

    A subclass declares its fields (annotated, in the order its constructor takes them) and
    its `message`, a template formatted with them (`"{size} bytes exceeds {limit}"`), or a
    `describe()` for a message that needs code: `BatchTooLarge(size, limit)` then holds
    `size` and `limit`, and `str()` of it is the message. A base declared with `init=False`
    is raised with a message of its own, as any exception (`StoreError("...")`)."""

    message: ClassVar[str] = ""

    def __init_subclass__(cls, *, init: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if init and inspect.get_annotations(cls):
            dataclasses.dataclass(eq=False, repr=False)(cls)

    def __post_init__(self) -> None:
        super().__init__(self.describe())

    def describe(self) -> str:
        """The message: `message` formatted with the fields."""
        return self.message.format(**vars(self))


class ContractError(StructuredError, init=False):
    """Base of every error in `contracts`."""


class InvalidToken(ContractError):
    """A value cannot be used as a subject token."""

    kind: str
    value: str
    problem: str

    def describe(self) -> str:
        shown = self.value if len(self.value) <= 40 else self.value[:40] + "…"
        return f"invalid {self.kind} {shown!r}: {self.problem}"


class UnknownEventType(ContractError):
    event_type: str
    message = "unknown event type {event_type!r}: no contract is registered for it"


class UnknownCommandType(ContractError):
    command_type: str
    message = "unknown command type {command_type!r}: no contract is registered for it"


class DecodeError(ContractError):
    """Bytes on the wire do not match the contract."""

    what: str
    reason: str
    message = "cannot decode {what}: {reason}"


class UpcastError(ContractError):
    event_type: str
    from_version: int
    to_version: int
    message = "no upcaster for {event_type!r} from version {from_version} to {to_version}"


class CommandRejected(StructuredError):
    """The command can never succeed (unknown thread, invalid state); do not retry it.
    Raised by the decisions (`domain`, the services' handlers) and answered by the command
    worker (`infra/jetstream/commandbus.py`)."""

    reason: str
    detail: str
    message = "{reason}: {detail}"
