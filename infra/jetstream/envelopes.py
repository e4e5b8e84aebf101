"""Wrapping the events of one decision in their envelopes, and checking them before they go.

`encode_checked` is the gate of every append: an event is encoded, then decoded strictly
with the same decoder readers use, so nothing a reader would refuse reaches the log (a
struct holds whatever Python gave it: a `bool` in an `int` field encodes as `true`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from agency.contracts.codec import encode, encode_event, event_type_of
from agency.contracts.envelope import Envelope, utc_now
from agency.contracts.ids import new_id
from agency.contracts.opened import OPENED
from agency.contracts.sealed import installed_cipher, key_id_for
from agency.infra.jetstream.errors import InvalidEvent
from agency.infra.jetstream.ports import Append
from agency.infra.jetstream.records import EventContext

_strict_decoder = msgspec.json.Decoder(Envelope)
_AT = re.compile(r"^(?P<problem>.*?)(?: - at `\$(?:\.payload)?\.?(?P<field>[^`]*)`)?$", re.S)


def new_envelopes(append: Append, trace: dict[str, str] | None = None) -> list[Envelope]:
    """The envelopes of an append, numbered on from its `expected` position, sharing one time,
    context and trace; the context's causation and the idempotency key only for the first
    `keyed` (None: all)."""
    ctx = append.context or EventContext()
    ts = utc_now()
    keyed = len(append.payloads) if append.keyed is None else append.keyed
    thread_id = ctx.thread_id
    if thread_id is None and append.aggregate == "thread":
        thread_id = append.aggregate_id
    return [
        Envelope(
            event_id=new_id(),
            tenant_id=append.tenant_id,
            aggregate=append.aggregate,
            aggregate_id=append.aggregate_id,
            seq=append.expected.seq + i + 1,
            ts=ts,
            type=event_type_of(payload),
            version=type(payload).schema_version,
            agency_id=ctx.agency_id,
            thread_id=thread_id,
            run_id=getattr(payload, "run_id", None) or ctx.run_id,
            causation_id=ctx.causation_id if i < keyed else None,
            correlation_id=ctx.correlation_id,
            idempotency_key=append.idempotency_key if i < keyed else None,
            trace=trace or {},
            payload=payload,
        )
        for i, payload in enumerate(append.payloads)
    ]


def encode_checked(envelopes: Sequence[Envelope]) -> list[bytes]:
    """Each envelope's bytes as stored (a thread's content sealed: `codec.encode_event`);
    `InvalidEvent` names the first event that would not read back. A sealed event is held
    as read back (`contracts.opened`): this process never opens what it wrote."""
    sealing = installed_cipher() is not None
    bodies: list[bytes] = []
    for envelope in envelopes:
        try:
            body = encode(envelope)
            read_back = _strict_decoder.decode(body)
        except (msgspec.ValidationError, msgspec.EncodeError, TypeError) as e:
            raise _invalid(envelope.type, str(e)) from None
        key_id = key_id_for(envelope) if sealing else None
        if key_id is not None:
            body = encode_event(envelope)
            OPENED.put(body, read_back, envelope.tenant_id, key_id)
        bodies.append(body)
    return bodies


async def prepare_keys(envelopes: Sequence[Envelope]) -> None:
    """Make sure the data keys the envelopes will be sealed with exist (the first event of a
    thread tree creates its key), before the synchronous encoding."""
    cipher = installed_cipher()
    if cipher is None:
        return
    keys = {(e.tenant_id, key_id_for(e)): _creates_root(e) for e in envelopes}
    for (tenant_id, key_id), fresh in keys.items():
        if key_id is not None:
            await cipher.prepare(tenant_id, key_id, fresh=fresh)


def _creates_root(envelope: Envelope) -> bool:
    """The envelope creates a tree's root thread, whose data key is then most likely new."""
    return envelope.type == "thread.created" and key_id_for(envelope) == envelope.aggregate_id


def _invalid(event_type: str, message: str) -> InvalidEvent:
    match = _AT.match(message)
    if match is None:
        return InvalidEvent(event_type, "", message)
    return InvalidEvent(event_type, match.group("field") or "", match.group("problem"))
