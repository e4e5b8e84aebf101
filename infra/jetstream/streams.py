"""Stream definitions as code. Provisioning is idempotent, safe under concurrent starts,
and runs at every start."""

from __future__ import annotations

from dataclasses import dataclass, replace

import structlog
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

from agency.contracts.partitions import PARTITIONS_KEY, EventLayout
from agency.contracts.subjects import (
    ALL_COMMANDS,
    ALL_DEAD_LETTERS,
    ALL_EVENTS,
    COMMANDS_STREAM,
    DEAD_LETTER_STREAM,
    EVENTS_STREAM,
)
from agency.infra.jetstream.consumers import provision_consumers
from agency.infra.jetstream.errors import is_transient
from agency.infra.jetstream.leaders import spread_leaders
from agency.infra.jetstream.partitions import check_partitions
from agency.infra.jetstream.upgrade import (
    LAYOUT,
    LAYOUT_KEY,
    UpgradeError,
    is_upgraded,
    upgrade_events,
)
from agency.infra.keystore.vault import keys_stream
from agency.infra.retry import RetryPolicy

log = structlog.get_logger(__name__)

DUPLICATE_WINDOW_SECONDS = 120.0
ATOMIC_BATCH_LIMIT = 1000
MAX_EVENT_BYTES = 1024 * 1024
# "stream name already in use with a different configuration"
STREAM_NAME_IN_USE = 10058


@dataclass(frozen=True, slots=True)
class StreamSettings:
    replicas: int = 1
    duplicate_window: float = DUPLICATE_WINDOW_SECONDS
    # Streams the events are spread over (`contracts/partitions.py`, docs/scaling.md).
    partitions: int = 1

    @property
    def layout(self) -> EventLayout:
        return EventLayout(self.partitions)


def _file_stream(
    settings: StreamSettings,
    name: str,
    description: str,
    subject: str,
    retention: RetentionPolicy,
    max_msg_size: int = MAX_EVENT_BYTES,
) -> StreamConfig:
    """What every stream shares: one subject filter, file storage, the settings' replicas."""
    return StreamConfig(
        name=name,
        description=description,
        subjects=[subject],
        retention=retention,
        storage=StorageType.FILE,
        num_replicas=settings.replicas,
        max_msg_size=max_msg_size,
    )


def _deduplicated(stream: StreamConfig, settings: StreamSettings) -> StreamConfig:
    """Repeats of a `Nats-Msg-Id` within the window are dropped; a full stream refuses."""
    return replace(stream, duplicate_window=settings.duplicate_window, discard=DiscardPolicy.NEW)


def event_stream(settings: StreamSettings) -> StreamConfig:
    description = "Every event of every tenant; the source of truth."
    stream = _file_stream(settings, EVENTS_STREAM, description, ALL_EVENTS, RetentionPolicy.LIMITS)
    # Facts are never deleted: deny delete and purge; no age or count limits.
    facts = replace(
        stream,
        deny_delete=True,
        deny_purge=True,
        allow_direct=True,
        allow_atomic=True,
        metadata={LAYOUT_KEY: LAYOUT},
    )
    return _deduplicated(facts, settings)


def event_streams(settings: StreamSettings) -> list[StreamConfig]:
    """The events streams: `event_stream` alone for one partition; otherwise one per
    partition, each taking its partition's subjects and carrying the count."""
    layout = settings.layout
    if not layout.partitioned:
        return [event_stream(settings)]
    one = event_stream(settings)
    marker = {LAYOUT_KEY: LAYOUT, PARTITIONS_KEY: str(layout.partitions)}
    return [
        replace(
            one,
            name=layout.stream(p),
            description=(f"Events of partition {p} of {layout.partitions}; the source of truth."),
            subjects=[layout.all_events(p)],
            metadata=marker,
        )
        for p in range(layout.partitions)
    ]


def command_stream(settings: StreamSettings) -> StreamConfig:
    description = "Commands to services; each is removed once a worker acknowledges it."
    stream = _file_stream(
        settings, COMMANDS_STREAM, description, ALL_COMMANDS, RetentionPolicy.WORK_QUEUE
    )
    return _deduplicated(stream, settings)


def command_streams(settings: StreamSettings) -> list[StreamConfig]:
    """The commands streams: `command_stream` alone for one partition; otherwise one per
    partition, each taking its partition's subjects (a command lies in the partition of
    the aggregate it is for, as its events do)."""
    layout = settings.layout
    one = command_stream(settings)
    if not layout.partitioned:
        return [one]
    return [
        replace(
            one,
            name=layout.command_stream(p),
            description=(
                f"Commands of partition {p} of {layout.partitions}; each is removed once a "
                "worker acknowledges it."
            ),
            subjects=[layout.all_commands(p)],
        )
        for p in range(layout.partitions)
    ]


def dead_letter_stream(settings: StreamSettings) -> StreamConfig:
    description = "Messages that could not be processed, with the reason in headers."
    stream = _file_stream(
        settings,
        DEAD_LETTER_STREAM,
        description,
        ALL_DEAD_LETTERS,
        RetentionPolicy.LIMITS,
        max_msg_size=2 * MAX_EVENT_BYTES,
    )
    return replace(stream, allow_direct=True)


# One round of provisioning retries: a cluster electing its leaders answers with timeouts
# and "unavailable" for a few seconds.
PROVISION_RETRY = RetryPolicy(attempts=10, timeout=60.0, wait_initial=0.5, wait_max=5.0)


async def provision(
    js: JetStreamContext,
    settings: StreamSettings | None = None,
    *,
    retry: RetryPolicy = PROVISION_RETRY,
    nc: NATS | None = None,
) -> None:
    """Create the streams, or update them in place to the definitions above, then the shared
    durable consumers. Safe to run from any number of processes at once.

    An events stream of the previous layout is upgraded first when `nc` is given
    (`upgrade.py`); without it, such a stream is refused rather than marked upgraded. A log
    provisioned with another count of partitions than `settings.partitions` is refused
    (`PartitionsMismatch`) before anything is changed. On a cluster, the partitions'
    leaders are then spread over the nodes (`leaders.py`, with `nc`)."""
    settings = settings or StreamSettings()
    layout = settings.layout
    await retry.call(is_transient, check_partitions, js, layout)
    if layout.partitioned:
        log.info("events log in partitions", partitions=layout.partitions)
    elif nc is not None:
        await upgrade_events(nc, js, event_stream(settings))
    else:
        await _refuse_previous_layout(js)
    if layout.partitioned:
        await retry.call(is_transient, _retire_single_commands, js)
    keys = keys_stream(replicas=settings.replicas)
    for config in (
        *event_streams(settings),
        *command_streams(settings),
        dead_letter_stream(settings),
        keys,
    ):
        await retry.call(is_transient, _ensure_stream, js, config, settings.replicas)
    await retry.call(is_transient, provision_consumers, js, layout)
    if nc is not None and layout.partitioned and settings.replicas > 1:
        await retry.call(is_transient, spread_leaders, nc, js, layout)


async def _refuse_previous_layout(js: JetStreamContext) -> None:
    try:
        info = await js.stream_info(EVENTS_STREAM)
    except NotFoundError:
        return
    if not is_upgraded(info) and info.state.messages > 0:
        raise UpgradeError(
            f"{EVENTS_STREAM} holds events of the previous subject layout; upgrade it with "
            "`agency migrate` (or start the system, which upgrades it) before using it"
        )


async def _retire_single_commands(js: JetStreamContext) -> None:
    """A log in partitions keeps its commands in partitions too: a single commands stream
    left from a store that had one (its subjects overlap the partitions') is removed while
    it holds no command, and refused while it does."""
    try:
        info = await js.stream_info(COMMANDS_STREAM)
    except NotFoundError:
        return
    if info.state.messages > 0:
        raise UpgradeError(
            f"{COMMANDS_STREAM} holds {info.state.messages} command(s) and the log is in "
            "partitions, whose commands are in one stream each; a store whose events were "
            f"in partitions and its commands in {COMMANDS_STREAM} is an earlier build's: let "
            "that build's services handle the commands before starting this one"
        )
    try:
        await js.delete_stream(COMMANDS_STREAM)
    except NotFoundError:
        return  # removed by a concurrent start
    log.info("single commands stream removed for the partitions'", stream=COMMANDS_STREAM)


async def _ensure_stream(js: JetStreamContext, config: StreamConfig, replicas: int) -> None:
    try:
        await js.stream_info(str(config.name))
    except NotFoundError:
        try:
            await js.add_stream(config)
        except BadRequestError as e:
            # Created by a concurrent start since we looked; bring it to our definition.
            if e.err_code != STREAM_NAME_IN_USE:
                raise
        else:
            log.info("stream created", stream=config.name, replicas=replicas)
            return
    await js.update_stream(config)
