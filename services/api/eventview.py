"""The one view of an event over HTTP: camelCase, the payload as `data`.

NATS and storage keep the envelope in snake_case; HTTP speaks camelCase. This module is the
one place the two meet for events: `/events`, the SSE stream and the WebSocket all send an
`EventView`, `{threadId, runId, seq, ts, type, data, eventId, …}` (seed 000's AgentEvent
plus the envelope's ids). Only the names the contracts define are renamed: free-form values
inside a payload (a tool's arguments, a file's content, metadata) keep their keys as written.
`?format=envelope` sends the stored envelope itself instead, for clients that read NATS too.

Pure msgspec, no web framework. `EventView` itself is the HTTP contract's
(`contracts/http.py`): the Python client decodes the same struct.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, NamedTuple

import msgspec

from agency.contracts.codec import in_clear
from agency.contracts.envelope import Envelope, EnvelopeFields
from agency.contracts.http import EventView

EventFormat = Literal["view", "envelope"]
EVENT_FORMATS: tuple[str, ...] = ("view", "envelope")


def camel(name: str) -> str:
    """`tool_call_id` → `toolCallId`; a name without underscores is unchanged."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_value(value: Any) -> Any:
    """A contract value with its struct fields renamed to camelCase, recursively.

    Structs are the contracts' own names and are renamed; dict keys are data and are kept.
    """
    if isinstance(value, msgspec.Struct):
        return _struct(value, with_tag=True)
    if isinstance(value, list | tuple):
        return [camel_value(item) for item in value]
    if isinstance(value, dict):
        return {key: camel_value(item) for key, item in value.items()}
    return value


class _Field(NamedTuple):
    name: str
    http_name: str
    info: msgspec.structs.FieldInfo


@functools.cache
def _fields(kind: type[msgspec.Struct]) -> tuple[_Field, ...]:
    """A struct type's fields and their HTTP names, worked out once per type: reading a
    struct's fields evaluates its annotations, which costs more than the encoding."""
    return tuple(_Field(f.name, camel(f.encode_name), f) for f in msgspec.structs.fields(kind))


def _struct(value: msgspec.Struct, *, with_tag: bool) -> dict[str, Any]:
    config = value.__struct_config__
    out: dict[str, Any] = {}
    if with_tag and config.tag_field is not None:
        out[config.tag_field] = config.tag
    for field in _fields(type(value)):
        item = getattr(value, field.name)
        if config.omit_defaults and _is_default(field.info, item):
            continue
        out[field.http_name] = camel_value(item)
    return out


def _is_default(field: msgspec.structs.FieldInfo, item: Any) -> bool:
    if field.default is not msgspec.NODEFAULT:
        return bool(item == field.default)
    if field.default_factory is not msgspec.NODEFAULT:
        return bool(item == field.default_factory())
    return False


def event_view(envelope: Envelope, stream_seq: int) -> EventView:
    return EventView(
        event_id=envelope.event_id,
        thread_id=envelope.thread_id,
        run_id=envelope.run_id,
        seq=envelope.seq,
        stream_seq=stream_seq,
        ts=envelope.ts,
        type=envelope.type,
        data=_struct(envelope.payload, with_tag=False),
        version=envelope.version,
        agency_id=envelope.agency_id,
        aggregate=envelope.aggregate,
        aggregate_id=envelope.aggregate_id,
        correlation_id=envelope.correlation_id,
        causation_id=envelope.causation_id,
        idempotency_key=envelope.idempotency_key,
    )


class StoredEnvelope(EnvelopeFields, frozen=True, kw_only=True):
    """The envelope as stored on NATS (snake_case), with its `stream_seq`: `?format=envelope`."""

    payload: dict[str, Any]
    stream_seq: int = 0


_encoder = msgspec.json.Encoder()
_stored_decoder = msgspec.json.Decoder(StoredEnvelope)


def encode_view(envelope: Envelope, stream_seq: int) -> bytes:
    return _encoder.encode(event_view(envelope, stream_seq))


def stored_envelope(raw: bytes, stream_seq: int) -> StoredEnvelope:
    """The stored envelope as it is, its content opened (docs/data.md), with its
    `stream_seq` added."""
    return msgspec.structs.replace(_stored_decoder.decode(in_clear(raw)), stream_seq=stream_seq)


def encode_envelope(raw: bytes, stream_seq: int) -> bytes:
    return _encoder.encode(stored_envelope(raw, stream_seq))
