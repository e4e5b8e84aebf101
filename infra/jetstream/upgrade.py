"""Upgrading an events stream of the previous layout to one subject per aggregate.

The previous release stored each event on `tenant.<t>.evt.<aggregate>.<id>.<event token>`;
this one stores it on `tenant.<t>.evt.<aggregate>.<id>` with its type in the
`Agency-Event-Type` header. A stream cannot be renamed nor its messages' subjects changed,
so the upgrade copies, keeping the log the truth at every step:

1. every message of `AGENCY_EVENTS`, in order, is copied to `AGENCY_EVENTS_UPGRADE` (on
   `agency_upgrade.<new subject>`, the type header added, the body byte for byte). Each
   copy expects the staging stream's last sequence to be the one before it
   (`Nats-Expected-Last-Sequence`), so message n lands at sequence n: the same order, the
   same stream sequences (what projections' checkpoints, snapshots and positions name),
   the same event ids, never twice; a crash resumes after the last copied message;
2. once the copy is whole, the durable consumers' positions (their acknowledged floors)
   are written into the staging stream's metadata, then `AGENCY_EVENTS` is deleted and
   created again in the new layout (marked `agency_event_layout: upgrading`, which
   nothing but the upgrade uses);
3. the staging stream is copied back the same way, the durable consumers are created
   again from their floors (filters cut to the aggregate), the stream is marked
   `agency_event_layout: aggregate`, and the staging stream is deleted.

Every step looks at what the streams hold and does only what is left, so it may be
stopped at any point and run again (`agency migrate`, or the next start). It runs before
the services start: nothing else writes to the streams meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import msgspec
import structlog
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig, StreamInfo
from nats.js.errors import NotFoundError

from agency.contracts.codec import decode_event
from agency.contracts.errors import ContractError
from agency.contracts.subjects import EVENT_TYPE_HEADER, EVENTS_STREAM
from agency.infra.jetstream.aggregate_reads import direct_batch
from agency.infra.jetstream.errors import StoreError

log = structlog.get_logger(__name__)

UPGRADE_STREAM = f"{EVENTS_STREAM}_UPGRADE"
UPGRADE_PREFIX = "agency_upgrade"
LAYOUT_KEY = "agency_event_layout"
LAYOUT = "aggregate"
# The events stream while it is filled back from the staging stream: not to be used yet.
UPGRADING = "upgrading"
_CONSUMERS_KEY = "agency_consumers"
_PAGE = 500
_TIMEOUT = 10.0
# `tenant.<t>.evt.<aggregate>.<id>`: an aggregate's subject; the previous layout had one
# token more, the event type.
_AGGREGATE_TOKENS = 5


class UpgradeError(StoreError):
    """The upgrade met a store it cannot carry over as it is; nothing was deleted."""


def aggregate_subject(subject: str) -> str:
    """A subject of the previous layout as the aggregate's subject; any other unchanged."""
    tokens = subject.split(".")
    if len(tokens) == _AGGREGATE_TOKENS + 1 and tokens[0] == "tenant" and tokens[2] == "evt":
        return ".".join(tokens[:_AGGREGATE_TOKENS])
    return subject


def aggregate_filter(subject: str) -> str:
    """A consumer's filter of the previous layout cut to the aggregates it spans."""
    tokens = subject.split(".")
    if len(tokens) > _AGGREGATE_TOKENS and tokens[0] == "tenant" and tokens[2] == "evt":
        return ".".join(tokens[:_AGGREGATE_TOKENS])
    return subject


def is_upgraded(info: StreamInfo) -> bool:
    return _layout(info) == LAYOUT


def _layout(info: StreamInfo) -> str | None:
    return (info.config.metadata or {}).get(LAYOUT_KEY)


async def upgrade_events(nc: NATS, js: JetStreamContext, final: StreamConfig) -> bool:
    """Carry an events stream of the previous layout over to `final` (the events stream's
    definition); True when there was anything to do. Idempotent and resumable."""
    events = await _info(js, EVENTS_STREAM)
    staging = await _info(js, UPGRADE_STREAM)
    if staging is None:
        if events is None or is_upgraded(events) or events.state.messages == 0:
            return False
        staging = await _create_staging(js, final)
    assert staging is not None
    if events is not None and _layout(events) is None:
        await _copy(nc, js, EVENTS_STREAM, UPGRADE_STREAM, _to_staging, events.state.last_seq)
        await _hand_over(js, events)
        events = None
    if events is None:
        await js.add_stream(_marked(final, UPGRADING))
        log.info("events stream created in the new layout", stream=EVENTS_STREAM)
    staging = await js.stream_info(UPGRADE_STREAM)
    await _copy(nc, js, UPGRADE_STREAM, EVENTS_STREAM, _from_staging, staging.state.last_seq)
    await _restore_consumers(js, staging)
    await js.update_stream(_marked(final, LAYOUT))
    await js.delete_stream(UPGRADE_STREAM)
    log.info("events stream upgraded", stream=EVENTS_STREAM, messages=staging.state.messages)
    return True


def _marked(config: StreamConfig, layout: str) -> StreamConfig:
    return replace(config, metadata={**(config.metadata or {}), LAYOUT_KEY: layout})


async def _info(js: JetStreamContext, stream: str) -> StreamInfo | None:
    try:
        return await js.stream_info(stream)
    except NotFoundError:
        return None


async def _create_staging(js: JetStreamContext, final: StreamConfig) -> StreamInfo:
    config = replace(
        final,
        name=UPGRADE_STREAM,
        description=f"{EVENTS_STREAM} while it is upgraded; removed once the upgrade is done.",
        subjects=[f"{UPGRADE_PREFIX}.>"],
        deny_delete=True,
        deny_purge=True,
        allow_atomic=False,
        metadata={},
    )
    log.info("upgrading the events stream to one subject per aggregate", stream=EVENTS_STREAM)
    return await js.add_stream(config)


def _to_staging(subject: str) -> str:
    return f"{UPGRADE_PREFIX}.{aggregate_subject(subject)}"


def _from_staging(subject: str) -> str:
    return subject.removeprefix(f"{UPGRADE_PREFIX}.")


async def _copy(
    nc: NATS,
    js: JetStreamContext,
    source: str,
    target: str,
    subject_of: Callable[[str], str],
    last: int,
) -> None:
    """Messages of `source` after `target`'s last, to `source`'s `last`, each landing at
    its own sequence."""
    done = (await js.stream_info(target)).state.last_seq
    start = done + 1
    while start <= last:
        request = {"seq": start, "next_by_subj": ">", "batch": _PAGE}
        got = 0
        async for msg in direct_batch(nc, source, request, _TIMEOUT):
            got += 1
            headers = msg.headers or {}
            seq = int(headers.get("Nats-Sequence", "0"))
            if seq > last:
                return
            if seq != done + 1:
                raise UpgradeError(
                    f"{source} has no message {done + 1} (next is {seq}): the copy would "
                    "renumber the log; restore the stream from a backup first"
                )
            await _store(nc, target, subject_of(headers["Nats-Subject"]), msg.data, headers, done)
            done = seq
        if got == 0:
            break
        start = done + 1
    if done < last:
        raise UpgradeError(f"{source} ends at {done}, before {last}")


async def _store(
    nc: NATS, target: str, subject: str, data: bytes, found: dict[str, str], after: int
) -> None:
    headers = {k: v for k, v in found.items() if not k.startswith("Nats-")}
    if EVENT_TYPE_HEADER not in headers and (event_type := _type_of(data)) is not None:
        headers[EVENT_TYPE_HEADER] = event_type
    headers["Nats-Expected-Last-Sequence"] = str(after)
    headers["Nats-Expected-Stream"] = target
    reply = await nc.request(subject, data, headers=headers, timeout=_TIMEOUT)
    answer = json.loads(reply.data)
    if "error" in answer:
        raise UpgradeError(f"copy of message {after + 1} to {target} refused: {answer['error']}")


def _type_of(data: bytes) -> str | None:
    try:
        return decode_event(data).type
    except (msgspec.DecodeError, msgspec.ValidationError, ContractError):
        return None  # no event: copied as it is, to keep every sequence


async def _hand_over(js: JetStreamContext, events: StreamInfo) -> None:
    """The copy is whole: note the durables' floors on the staging stream, then delete the
    stream of the previous layout."""
    staging = await js.stream_info(UPGRADE_STREAM)
    if staging.state.last_seq != events.state.last_seq:
        raise UpgradeError(
            f"{UPGRADE_STREAM} holds {staging.state.last_seq} messages of "
            f"{events.state.last_seq}; not deleting {EVENTS_STREAM}"
        )
    consumers = []
    for info in await js.consumers_info(EVENTS_STREAM):
        if info.config.durable_name is None:
            continue  # an ephemeral reader: gone with the stream, as with any restart
        fields = info.config.as_dict()
        fields["ack_floor"] = info.ack_floor.stream_seq if info.ack_floor else 0
        consumers.append(fields)
    metadata = {**(staging.config.metadata or {}), _CONSUMERS_KEY: json.dumps(consumers)}
    await js.update_stream(replace(staging.config, metadata=metadata))
    await js.delete_stream(EVENTS_STREAM)
    log.info("events stream of the previous layout deleted", consumers=len(consumers))


async def _restore_consumers(js: JetStreamContext, staging: StreamInfo) -> None:
    saved: list[dict[str, Any]] = json.loads(
        (staging.config.metadata or {}).get(_CONSUMERS_KEY, "[]")
    )
    existing = {c.name for c in await js.consumers_info(EVENTS_STREAM)}
    for fields in saved:
        floor = int(fields.pop("ack_floor", 0))
        config = ConsumerConfig.from_response(fields)
        if config.durable_name in existing:
            continue
        filters = [aggregate_filter(f) for f in config.filter_subjects or ()]
        if config.filter_subject:
            filters.append(aggregate_filter(config.filter_subject))
        kept = list(dict.fromkeys(filters))
        config.filter_subject = kept[0] if len(kept) == 1 else None
        config.filter_subjects = kept if len(kept) > 1 else None
        config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = floor + 1
        config.opt_start_time = None
        await js.add_consumer(EVENTS_STREAM, config=config)
