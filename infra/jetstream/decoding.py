"""Messages of the events stream as recorded events, or as what they are when they are none."""

from __future__ import annotations

import msgspec
from nats.aio.msg import Msg

from agency.contracts.codec import decode_event
from agency.contracts.errors import ContractError
from agency.contracts.partitions import aggregate_of
from agency.contracts.sealed import PayloadErased
from agency.contracts.subjects import EVENT_TYPE_HEADER
from agency.infra.jetstream.records import RecordedEvent, UndecodableEvent


def decode_recorded(data: bytes, stream_seq: int, subject: str) -> RecordedEvent | UndecodableEvent:
    try:
        envelope = decode_event(data)
    except PayloadErased as e:
        return UndecodableEvent(
            stream_seq=stream_seq, subject=subject, data=data, reason=str(e), erased=True
        )
    except (ContractError, msgspec.DecodeError) as e:
        return UndecodableEvent(stream_seq=stream_seq, subject=subject, data=data, reason=str(e))
    # The subject is what the broker's permissions confine to a tenant; an envelope that
    # names another tenant or aggregate than its subject is forged and never believed.
    # (On a log of partitions the partition's token follows `evt`; the stream it is in takes
    # that partition's subjects only.)
    expected = f"tenant.{envelope.tenant_id}.evt.{envelope.aggregate}.{envelope.aggregate_id}"
    if subject != expected and aggregate_of(subject) != (
        envelope.tenant_id,
        envelope.aggregate,
        envelope.aggregate_id,
    ):
        return UndecodableEvent(
            stream_seq=stream_seq,
            subject=subject,
            data=data,
            reason=f"envelope does not match its subject (it names {expected})",
        )
    return RecordedEvent(envelope=envelope, stream_seq=stream_seq, subject=subject, raw=data)


def record_from_direct_get(msg: Msg) -> RecordedEvent | UndecodableEvent:
    """A direct get's answer: the stream sequence and subject are in its headers."""
    headers = msg.headers or {}
    stream_seq = int(headers.get("Nats-Sequence", "0"))
    subject = headers.get("Nats-Subject", msg.subject)
    return decode_recorded(msg.data, stream_seq, subject)


def stream_seq_of(msg: Msg) -> int:
    """The stream sequence of a consumer-delivered message, read from its ack subject.

    Cheaper than `msg.metadata`, which builds a full object per message on a hot path.
    Ack subjects are `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.…` (9 tokens)
    or, with a domain and account hash, 12 tokens with the stream sequence at index 7.
    """
    tokens = (msg.reply or "").split(".")
    if len(tokens) == 9:
        return int(tokens[5])
    if len(tokens) >= 12:
        return int(tokens[7])
    return int(msg.metadata.sequence.stream)


def record_from_js_msg(msg: Msg, stream_seq: int | None = None) -> RecordedEvent | UndecodableEvent:
    """A consumer-delivered message as a recorded event."""
    if stream_seq is None:
        stream_seq = stream_seq_of(msg)
    return decode_recorded(msg.data, stream_seq, msg.subject)


def event_type_of(msg: Msg) -> str | None:
    """The type an event's header names, without decoding it (None: no header)."""
    headers = msg.headers
    return headers.get(EVENT_TYPE_HEADER) if headers else None
