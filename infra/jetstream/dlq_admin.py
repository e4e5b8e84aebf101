"""Looking into the dead-letter stream and re-driving what is in it.

- `list_letters` pages through the stream (oldest first, from a sequence), optionally one
  tenant's or one reason's;
- `replay` publishes a dead-lettered command again on its original subject, then removes
  the letter. Only commands can be re-driven: a dead letter from the events stream records
  an event a consumer could not handle, and the event is still in the log (publishing it
  again would store it twice). Fix the consumer and it is processed on its next delivery,
  or drop the letter;
- `drop` removes a letter for good.

A replayed command carries `Nats-Msg-Id: dlq-replay:<letter seq>`, so replaying the same
letter twice within the duplicate window stores it once.
"""

from __future__ import annotations

import contextlib
from datetime import datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from agency.contracts.errors import InvalidToken
from agency.contracts.partitions import is_command_stream
from agency.contracts.subjects import COMMANDS_STREAM, DEAD_LETTER_STREAM, tenant_of
from agency.infra.jetstream.deadletter import (
    CONSUMER_HEADER,
    DELIVERIES_HEADER,
    DETAIL_HEADER,
    REASON_HEADER,
    SEQ_HEADER,
    STREAM_HEADER,
    SUBJECT_HEADER,
)

MAX_PAGE = 500


class DeadLetterError(Exception):
    """A letter that does not exist or cannot be replayed; the message says which."""


class LetterFields(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What a dead letter records of the message that could not be handled, camelCase when
    encoded: the API's `LetterOut` answers them as they are."""

    seq: int
    time: datetime | None
    reason: str
    detail: str
    source_stream: str
    source_subject: str
    source_seq: int
    consumer: str
    deliveries: int
    tenant_id: str | None
    size: int


class LetterInfo(LetterFields, frozen=True, kw_only=True):
    data: bytes

    @property
    def replayable(self) -> bool:
        return is_command_stream(self.source_stream)


def _letter(msg: RawStreamMsg) -> LetterInfo:
    headers = msg.headers or {}
    subject = headers.get(SUBJECT_HEADER, "")
    try:
        tenant: str | None = tenant_of(subject)
    except InvalidToken:
        tenant = None
    data = msg.data or b""
    return LetterInfo(
        seq=msg.seq or 0,
        time=msg.time,
        reason=headers.get(REASON_HEADER, ""),
        detail=headers.get(DETAIL_HEADER, ""),
        source_stream=headers.get(STREAM_HEADER, ""),
        source_subject=subject,
        source_seq=int(headers.get(SEQ_HEADER, "0") or 0),
        consumer=headers.get(CONSUMER_HEADER, ""),
        deliveries=int(headers.get(DELIVERIES_HEADER, "0") or 0),
        tenant_id=tenant,
        size=len(data),
        data=data,
    )


async def list_letters(
    js: JetStreamContext,
    *,
    from_seq: int = 1,
    limit: int = 50,
    tenant: str | None = None,
    reason: str | None = None,
) -> list[LetterInfo]:
    """Up to `limit` letters from `from_seq` on, oldest first, filtered."""
    limit = max(1, min(limit, MAX_PAGE))
    subject = f"dlq.*.{reason}" if reason else "dlq.>"
    letters: list[LetterInfo] = []
    seq = max(from_seq, 1)
    while len(letters) < limit:
        try:
            msg = await js.get_msg(DEAD_LETTER_STREAM, seq=seq, subject=subject, next=True)
        except NotFoundError:
            break
        letter = _letter(msg)
        if tenant is None or letter.tenant_id == tenant:
            letters.append(letter)
        seq = letter.seq + 1
    return letters


async def get_letter(js: JetStreamContext, seq: int) -> LetterInfo:
    try:
        return _letter(await js.get_msg(DEAD_LETTER_STREAM, seq=seq))
    except NotFoundError:
        raise DeadLetterError(f"no dead letter {seq}") from None


async def replay(js: JetStreamContext, seq: int) -> int:
    """Publish the letter's command again on its subject (in its stream: a partition's, on
    a log in partitions); returns the command's new seq."""
    letter = await get_letter(js, seq)
    if not letter.replayable:
        raise DeadLetterError(
            f"dead letter {seq} comes from {letter.source_stream or 'an unknown stream'}, not "
            f"from {COMMANDS_STREAM}: only commands can be re-driven (the event is still in "
            "the log; fix its consumer, or drop the letter)"
        )
    ack = await js.publish(
        letter.source_subject,
        letter.data,
        stream=letter.source_stream,
        headers={"Nats-Msg-Id": f"dlq-replay:{seq}"},
    )
    await drop(js, seq)
    return ack.seq


async def drop(js: JetStreamContext, seq: int) -> None:
    await get_letter(js, seq)
    with contextlib.suppress(NotFoundError):  # dropped meanwhile by someone else
        await js.delete_msg(DEAD_LETTER_STREAM, seq)
