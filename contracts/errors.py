"""Errors raised while building or reading wire messages."""

from __future__ import annotations


class ContractError(Exception):
    """Base of every error in `contracts`."""


class InvalidToken(ContractError):
    """A value cannot be used as a subject token."""

    def __init__(self, kind: str, value: str, problem: str) -> None:
        self.kind = kind
        self.value = value
        self.problem = problem
        shown = value if len(value) <= 40 else value[:40] + "…"
        super().__init__(f"invalid {kind} {shown!r}: {problem}")


class UnknownEventType(ContractError):
    def __init__(self, event_type: str) -> None:
        self.event_type = event_type
        super().__init__(f"unknown event type {event_type!r}: no contract is registered for it")


class UnknownCommandType(ContractError):
    def __init__(self, command_type: str) -> None:
        self.command_type = command_type
        super().__init__(f"unknown command type {command_type!r}: no contract is registered for it")


class DecodeError(ContractError):
    """Bytes on the wire do not match the contract."""

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"cannot decode {what}: {reason}")


class UpcastError(ContractError):
    def __init__(self, event_type: str, from_version: int, to_version: int) -> None:
        self.event_type = event_type
        self.from_version = from_version
        self.to_version = to_version
        super().__init__(
            f"no upcaster for {event_type!r} from version {from_version} to {to_version}"
        )


class CommandRejected(Exception):
    """The command can never succeed (unknown thread, invalid state); do not retry it.
    Raised by the decisions (`domain`, the services' handlers) and answered by the command
    worker (`infra/jetstream/commandbus.py`)."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")
