"""The base of every command: the service and verb that form its subject.

A command's tag is `<service>.<verb>` (`registry.create_tenant`), so a command class names
both once, in its tag."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import msgspec


class _TagPart:
    """The service (`0`) or the verb (`1`) of a command class, read off its tag."""

    def __init__(self, index: int) -> None:
        self._index = index

    def __get__(self, obj: object, owner: type[Command]) -> str:
        tag = owner.__struct_config__.tag
        if not isinstance(tag, str) or "." not in tag:
            raise TypeError(f"{owner.__name__} has no tag of the form <service>.<verb>")
        return tag.split(".", 1)[self._index]


class Command(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    service = _TagPart(0)
    verb = _TagPart(1)
    schema_version: ClassVar[int] = 1


class CommandEnvelopeFields(msgspec.Struct, frozen=True, kw_only=True):
    """What every stored command carries beside its payload, clear (`CommandEnvelope`) or
    sealed (`SealedCommandEnvelope`)."""

    command_id: str
    tenant_id: str
    idempotency_key: str
    ts: datetime
    type: str
    version: int = 1
    causation_id: str | None = None
    correlation_id: str | None = None
    trace: dict[str, str] = {}
