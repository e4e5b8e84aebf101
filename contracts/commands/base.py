"""The base of every command: the service and verb that form its subject."""

from __future__ import annotations

from typing import ClassVar

import msgspec


class Command(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    service: ClassVar[str]
    verb: ClassVar[str]
    schema_version: ClassVar[int] = 1
