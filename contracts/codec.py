"""Encoding and decoding of events and commands, with upcasting of old schema versions.

Encoders and decoders are built once at import; a message is decoded in one pass when its
version is current and through the upcasters otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

import msgspec

from agency.contracts.commands import AnyCommand, Command, CommandEnvelope
from agency.contracts.envelope import Envelope, WireEnvelope
from agency.contracts.errors import (
    ContractError,
    DecodeError,
    UnknownCommandType,
    UnknownEventType,
    UpcastError,
)
from agency.contracts.events import AnyEvent, Event, ThreadDeleted
from agency.contracts.opened import OPENED
from agency.contracts.sealed import (
    SealedCommandEnvelope,
    SealedEnvelope,
    SealedPart,
    aad_of,
    installed_cipher,
    key_id_for,
    split_fields,
)
from agency.contracts.upcasters import blueprint_saved_v1

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

EVENT_TYPES: dict[str, type[Event]] = {cls.__struct_config__.tag: cls for cls in get_args(AnyEvent)}
COMMAND_TYPES: dict[str, type[Command]] = {
    cls.__struct_config__.tag: cls for cls in get_args(AnyCommand)
}

# (event type, from version) → function turning a payload of that version into the next.
_UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("blueprint.saved", 1): blueprint_saved_v1,
}

_encoder = msgspec.json.Encoder()
_envelope_decoder = msgspec.json.Decoder(Envelope)
_wire_decoder = msgspec.json.Decoder(WireEnvelope)
_payload_decoder = msgspec.json.Decoder(AnyEvent)
_command_decoder = msgspec.json.Decoder(CommandEnvelope)
_raw_decoder = msgspec.json.Decoder(dict[str, Any])
_sealed_decoder = msgspec.json.Decoder(SealedEnvelope)
_sealed_command_decoder = msgspec.json.Decoder(SealedCommandEnvelope)
_COMMAND_CLEAR = frozenset({"thread_id"})
# A sealed message has this key in its envelope (`"sealed": {` once PostgreSQL's jsonb has
# reformatted it); a clear payload's text cannot hold it unescaped, and a payload map with
# a `sealed` key only costs the slower path.
_SEALED_MARK = b'"sealed":'


def register_upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    def register(fn: Upcaster) -> Upcaster:
        _UPCASTERS[(event_type, from_version)] = fn
        return fn

    return register


def event_type_of(payload: Event) -> str:
    return payload.__struct_config__.tag  # type: ignore[return-value]


def current_version(event_type: str) -> int:
    cls = EVENT_TYPES.get(event_type)
    if cls is None:
        raise UnknownEventType(event_type)
    return cls.schema_version


def encode(value: Envelope | CommandEnvelope | msgspec.Struct) -> bytes:
    return _encoder.encode(value)


def encode_event(envelope: Envelope) -> bytes:
    """The event as stored: its content sealed under its tree's data key when the process
    has a cipher (`contracts.sealed`) and the event is a thread's; otherwise in clear."""
    cipher = installed_cipher()
    key_id = key_id_for(envelope) if cipher is not None else None
    if cipher is None or key_id is None:
        return _encoder.encode(envelope)
    clear, hidden = split_fields(msgspec.to_builtins(envelope.payload))
    data = cipher.seal(envelope.tenant_id, key_id, _encoder.encode(hidden), aad_of(envelope))
    fields = msgspec.structs.asdict(envelope)
    fields["payload"] = msgspec.Raw(_encoder.encode(clear))
    return _encoder.encode(SealedEnvelope(**fields, sealed=SealedPart(key=key_id, data=data)))


def decode_event(data: bytes) -> Envelope:
    """Decode a stored event, upcasting its payload to the current schema if it is older,
    opening its sealed content (`encode_event`) with the process's cipher, once per process
    while it is held (`contracts.opened`)."""
    if _SEALED_MARK in data:
        opened = OPENED.get(data if isinstance(data, bytes) else bytes(data))
        return opened if opened is not None else _decode_sealed(data)
    try:
        envelope = _envelope_decoder.decode(data)
    except msgspec.DecodeError:
        envelope = None
    if envelope is None or envelope.version != type(envelope.payload).schema_version:
        envelope = _decode_with_upcast(data)
    elif envelope.type != event_type_of(envelope.payload):
        raise DecodeError("event", f"type {envelope.type!r} does not match its payload")
    if isinstance(envelope.payload, ThreadDeleted):
        # The tree's key is destroyed: what this process opened of it goes too, and the
        # key it held (another process may have destroyed it in the store).
        OPENED.forget(envelope.tenant_id, envelope.payload.root_thread_id)
        if (cipher := installed_cipher()) is not None:
            cipher.forget(envelope.tenant_id, envelope.payload.root_thread_id)
    return envelope


def is_sealed(data: bytes) -> bool:
    """Whether the stored message may be sealed (`encode_event`); a clear one with a
    `sealed` map in its payload answers True too, and reads as written."""
    return _SEALED_MARK in data


def in_clear(data: bytes) -> bytes:
    """The stored event's bytes with its content opened (as written before sealing), for
    showing an envelope as stored; the bytes themselves when it is not sealed."""
    if _SEALED_MARK not in data:
        return data
    return _encoder.encode(decode_event(data))


def readable_event(data: bytes) -> Envelope | None:
    """The event, or None when `data` is not one the contracts can read: for listeners
    that skip what they cannot read (a dead letter is the consumers' business)."""
    try:
        return decode_event(data)
    except (ContractError, msgspec.DecodeError):
        return None


def _decode_sealed(data: bytes) -> Envelope:
    try:
        wire = _sealed_decoder.decode(data)
    except msgspec.ValidationError:
        return _decode_with_upcast(data)  # a clear event whose payload has a `sealed` map
    except msgspec.DecodeError as e:
        raise DecodeError("event envelope", str(e)) from e
    cipher = installed_cipher()
    if cipher is None:
        raise DecodeError(f"{wire.type} payload", "it is sealed and no key store is configured")
    opened = cipher.open(wire.tenant_id, wire.sealed.key, wire.sealed.data, aad_of(wire))
    plain = msgspec.structs.asdict(wire)
    del plain["sealed"]
    merged = _merged_objects(bytes(wire.payload), opened)
    cls = EVENT_TYPES.get(wire.type)
    if cls is not None and wire.version == cls.schema_version:
        # Current: the payload decoded in one pass from its two halves' JSON, as stored.
        try:
            payload = _payload_decoder.decode(merged)
        except msgspec.DecodeError as e:
            raise DecodeError(f"{wire.type} payload", str(e)) from e
        if event_type_of(payload) != wire.type:
            raise DecodeError("event", f"type {wire.type!r} does not match its payload")
        plain["payload"] = payload
        envelope = Envelope(**plain)
    else:
        try:
            fields = _raw_decoder.decode(merged)
        except msgspec.DecodeError as e:
            raise DecodeError(f"{wire.type} payload", str(e)) from e
        plain["payload"] = msgspec.Raw(b"{}")
        envelope = _upcast_fields(WireEnvelope(**plain), fields)
    OPENED.put(data, envelope, wire.tenant_id, wire.sealed.key)
    return envelope


def _merged_objects(clear: bytes, opened: bytes) -> bytes:
    """Two JSON objects with no key in common (a sealed payload's clear and opened
    halves) as one."""
    clear, opened = clear.strip(), opened.strip()
    if not (clear.startswith(b"{") and clear.endswith(b"}") and opened.startswith(b"{")):
        raise DecodeError("sealed payload", "its halves are not JSON objects")
    if clear == b"{}" or not clear[1:-1].strip():
        return opened
    if not opened[1:-1].strip():
        return clear
    return clear[:-1] + b"," + opened[1:]


def _decode_with_upcast(data: bytes) -> Envelope:
    try:
        wire = _wire_decoder.decode(data)
    except msgspec.DecodeError as e:
        raise DecodeError("event envelope", str(e)) from e
    try:
        fields = _raw_decoder.decode(wire.payload)
    except msgspec.DecodeError as e:
        raise DecodeError(f"{wire.type} payload", str(e)) from e
    return _upcast_fields(wire, fields)


def _upcast_fields(wire: WireEnvelope, fields: dict[str, Any]) -> Envelope:
    target = current_version(wire.type)
    version = wire.version
    while version < target:
        step = _UPCASTERS.get((wire.type, version))
        if step is None:
            raise UpcastError(wire.type, version, target)
        fields = step(fields)
        version += 1
    if version != target:
        raise UpcastError(wire.type, wire.version, target)
    fields["type"] = wire.type
    try:
        # Through JSON, so a payload reads exactly as the JSON decoder reads it.
        payload = _payload_decoder.decode(_encoder.encode(fields))
    except msgspec.ValidationError as e:
        raise DecodeError(f"{wire.type} payload", str(e)) from e
    # The envelope's own fields (`EnvelopeFields`) as stored; the version the payload now has.
    return Envelope(**{**msgspec.structs.asdict(wire), "version": target, "payload": payload})


def command_key_id(envelope: CommandEnvelope) -> str | None:
    """The data key a command is sealed with: its thread's own (destroyed with its tree's
    when the thread is deleted); None for a command to no thread."""
    thread_id = getattr(envelope.payload, "thread_id", None)
    return thread_id if isinstance(thread_id, str) and thread_id else None


def encode_command(envelope: CommandEnvelope) -> bytes:
    """The command as stored: a thread's command sealed as its events are (`encode_event`)
    when the process has a cipher."""
    cipher = installed_cipher()
    key_id = command_key_id(envelope) if cipher is not None else None
    if cipher is None or key_id is None:
        return _encoder.encode(envelope)
    clear, hidden = split_fields(msgspec.to_builtins(envelope.payload), _COMMAND_CLEAR)
    aad = f"{envelope.tenant_id}|{envelope.command_id}|{envelope.type}".encode()
    data = cipher.seal(envelope.tenant_id, key_id, _encoder.encode(hidden), aad)
    fields = {f: getattr(envelope, f) for f in envelope.__struct_fields__ if f != "payload"}
    part = SealedPart(key=key_id, data=data)
    clear_payload = msgspec.Raw(_encoder.encode(clear))
    return _encoder.encode(SealedCommandEnvelope(**fields, sealed=part, payload=clear_payload))


def _open_command(data: bytes) -> bytes:
    """A sealed command's bytes as they were before sealing."""
    wire = _sealed_command_decoder.decode(data)
    cipher = installed_cipher()
    if cipher is None:
        raise DecodeError("command", "it is sealed and no key store is configured")
    aad = f"{wire.tenant_id}|{wire.command_id}|{wire.type}".encode()
    opened = cipher.open(wire.tenant_id, wire.sealed.key, wire.sealed.data, aad)
    payload = {**_raw_decoder.decode(opened), **_raw_decoder.decode(wire.payload)}
    payload["type"] = wire.type
    fields = {f: getattr(wire, f) for f in wire.__struct_fields__ if f not in ("payload", "sealed")}
    return _encoder.encode({**fields, "payload": payload})


def decode_command(data: bytes) -> CommandEnvelope:
    if _SEALED_MARK in data:
        try:
            data = _open_command(data)
        except msgspec.ValidationError:
            pass  # a clear command whose payload has a `sealed` map
        except msgspec.DecodeError as e:
            raise DecodeError("command", str(e)) from e
    try:
        envelope = _command_decoder.decode(data)
    except msgspec.DecodeError as e:
        raise DecodeError("command", str(e)) from e
    tag = envelope.payload.__struct_config__.tag
    if envelope.type != tag:
        raise DecodeError("command", f"type {envelope.type!r} does not match its payload")
    return envelope


def command_type_of(payload: Command) -> str:
    tag = payload.__struct_config__.tag
    if tag not in COMMAND_TYPES:
        raise UnknownCommandType(str(tag))
    return str(tag)
