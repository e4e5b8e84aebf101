"""The dead-letter stream: what could not be processed, with why, never lost."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from nats.js import JetStreamContext

from agency.contracts.subjects import dead_letter_subject

log = structlog.get_logger(__name__)

REASON_HEADER = "Agency-Dlq-Reason"
DETAIL_HEADER = "Agency-Dlq-Detail"
SUBJECT_HEADER = "Agency-Dlq-Subject"
STREAM_HEADER = "Agency-Dlq-Stream"
SEQ_HEADER = "Agency-Dlq-Stream-Seq"
CONSUMER_HEADER = "Agency-Dlq-Consumer"
DELIVERIES_HEADER = "Agency-Dlq-Deliveries"

_MAX_DETAIL = 2000


@dataclass(frozen=True, slots=True)
class DeadLetter:
    source_stream: str
    subject: str
    stream_seq: int
    reason: str
    detail: str
    data: bytes
    consumer: str = ""
    deliveries: int = 0


class DeadLetters:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def put(self, letter: DeadLetter) -> None:
        headers = {
            REASON_HEADER: letter.reason,
            DETAIL_HEADER: letter.detail[:_MAX_DETAIL].replace("\r", " ").replace("\n", " "),
            SUBJECT_HEADER: letter.subject,
            STREAM_HEADER: letter.source_stream,
            SEQ_HEADER: str(letter.stream_seq),
            CONSUMER_HEADER: letter.consumer,
            DELIVERIES_HEADER: str(letter.deliveries),
            # The same source message dead-lettered twice (a redelivery racing the first
            # attempt) is stored once.
            "Nats-Msg-Id": f"{letter.source_stream}:{letter.stream_seq}:{letter.consumer}",
        }
        await self._js.publish(
            dead_letter_subject(letter.source_stream, letter.reason), letter.data, headers=headers
        )
        log.warning(
            "dead-lettered",
            reason=letter.reason,
            detail=letter.detail[:200],
            subject=letter.subject,
            stream_seq=letter.stream_seq,
            consumer=letter.consumer,
        )
