"""How an append reaches the events log: one plain publish for a single event, an atomic
batch for several, each retried with the same message ids while a stream leader election
stalls writes, and the server's answer read as a position, a duplicate or a conflict."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError, TimeoutError as NatsTimeoutError

from agency.contracts.ids import new_id
from agency.contracts.subjects import EVENT_TYPE_HEADER
from agency.infra.jetstream.errors import AppendError, ConcurrencyError, StoreError, StoreTimeout
from agency.infra.jetstream.records import Position

WRONG_LAST_SEQUENCE = 10071
BATCH_INFLIGHT_CONFLICT = 10164
BATCH_DUPLICATE_MSG_ID = 10201
_ACTUAL_SEQ = re.compile(r"wrong last sequence: (\d+)")


class AppendPublisher:
    """Publishes one aggregate's appends; answers (last stream sequence, duplicate)."""

    def __init__(self, nc: NATS, *, timeout: float, retry_budget: float) -> None:
        self._nc = nc
        self._timeout = timeout
        self._retry_budget = retry_budget

    async def single(
        self, subject: str, event_type: str, body: bytes, msg_id: str | None, expected: Position
    ) -> tuple[int, bool]:
        family = subject
        headers = {
            EVENT_TYPE_HEADER: event_type,
            "Nats-Expected-Last-Subject-Sequence": str(expected.stream_seq),
        }
        if msg_id is not None:
            headers["Nats-Msg-Id"] = msg_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_budget
        while True:
            try:
                reply = await self._nc.request(
                    subject, body, headers=headers, timeout=self._timeout
                )
            except (TimeoutError, NatsTimeoutError, NoRespondersError):
                # The same message id and bytes make the retry safe: stored once at most.
                if loop.time() >= deadline:
                    raise StoreTimeout(f"append to {family}", self._retry_budget) from None
                await asyncio.sleep(0.25)
                continue
            return _accept(_json(reply.data), subject, family, expected)

    async def batch(
        self,
        family: str,
        types: list[str],
        bodies: list[bytes],
        msg_ids: list[str | None],
        expected: Position,
    ) -> tuple[int, bool]:
        subject = family
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_budget
        while True:
            batch_id = new_id()
            last = len(bodies)
            for i, (event_type, body, msg_id) in enumerate(
                zip(types, bodies, msg_ids, strict=True), start=1
            ):
                headers = {
                    EVENT_TYPE_HEADER: event_type,
                    "Nats-Batch-Id": batch_id,
                    "Nats-Batch-Sequence": str(i),
                }
                if msg_id is not None:
                    headers["Nats-Msg-Id"] = msg_id
                if i == 1:
                    # One expectation per aggregate per batch: a second one is refused.
                    headers["Nats-Expected-Last-Subject-Sequence"] = str(expected.stream_seq)
                if i < last:
                    await self._nc.publish(subject, body, headers=headers)
                    continue
                headers["Nats-Batch-Commit"] = "1"
                try:
                    reply = await self._nc.request(
                        subject, body, headers=headers, timeout=self._timeout
                    )
                except (TimeoutError, NatsTimeoutError, NoRespondersError):
                    if loop.time() >= deadline:
                        raise StoreTimeout(
                            f"atomic append to {family}", self._retry_budget
                        ) from None
                    await asyncio.sleep(0.25)
                    break
                return _accept(_json(reply.data), subject, family, expected)


def _accept(
    reply: dict[str, Any], subject: str, family: str, expected: Position
) -> tuple[int, bool]:
    error = reply.get("error")
    if error is None:
        return int(reply["seq"]), bool(reply.get("duplicate", False))
    code = error.get("err_code")
    description = str(error.get("description", ""))
    if code == WRONG_LAST_SEQUENCE:
        match = _ACTUAL_SEQ.search(description)
        actual = int(match.group(1)) if match else None
        raise ConcurrencyError(family, expected.stream_seq, actual)
    if code == BATCH_INFLIGHT_CONFLICT:
        raise ConcurrencyError(family, expected.stream_seq, None)
    if code == BATCH_DUPLICATE_MSG_ID:
        return 0, True
    raise AppendError(subject, code, description)


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as e:
        raise StoreError(f"unreadable answer from the server: {data[:200]!r}") from e
    if not isinstance(value, dict):
        raise StoreError(f"unexpected answer from the server: {data[:200]!r}")
    return value
