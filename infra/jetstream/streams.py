"""Stream definitions as code. Provisioning is idempotent and runs at every start."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from contracts.subjects import (
    ALL_COMMANDS,
    ALL_DEAD_LETTERS,
    ALL_EVENTS,
    COMMANDS_STREAM,
    DEAD_LETTER_STREAM,
    EVENTS_STREAM,
)
from infra.jetstream.consumers import provision_consumers

log = structlog.get_logger(__name__)

DUPLICATE_WINDOW_SECONDS = 120.0
ATOMIC_BATCH_LIMIT = 1000
MAX_EVENT_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class StreamSettings:
    replicas: int = 1
    duplicate_window: float = DUPLICATE_WINDOW_SECONDS


def event_stream(settings: StreamSettings) -> StreamConfig:
    # Facts are never deleted: deny delete and purge; no age or count limits.
    return StreamConfig(
        name=EVENTS_STREAM,
        description="Every event of every tenant; the source of truth.",
        subjects=[ALL_EVENTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=settings.replicas,
        duplicate_window=settings.duplicate_window,
        max_msg_size=MAX_EVENT_BYTES,
        deny_delete=True,
        deny_purge=True,
        allow_direct=True,
        allow_atomic=True,
        discard=DiscardPolicy.NEW,
    )


def command_stream(settings: StreamSettings) -> StreamConfig:
    return StreamConfig(
        name=COMMANDS_STREAM,
        description="Commands to services; each is removed once a worker acknowledges it.",
        subjects=[ALL_COMMANDS],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        num_replicas=settings.replicas,
        duplicate_window=settings.duplicate_window,
        max_msg_size=MAX_EVENT_BYTES,
        discard=DiscardPolicy.NEW,
    )


def dead_letter_stream(settings: StreamSettings) -> StreamConfig:
    return StreamConfig(
        name=DEAD_LETTER_STREAM,
        description="Messages that could not be processed, with the reason in headers.",
        subjects=[ALL_DEAD_LETTERS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=settings.replicas,
        max_msg_size=2 * MAX_EVENT_BYTES,
        allow_direct=True,
    )


async def provision(js: JetStreamContext, settings: StreamSettings | None = None) -> None:
    """Create the streams, or update them in place to the definitions above."""
    settings = settings or StreamSettings()
    for config in (event_stream(settings), command_stream(settings), dead_letter_stream(settings)):
        try:
            await js.stream_info(str(config.name))
        except NotFoundError:
            await js.add_stream(config)
            log.info("stream created", stream=config.name, replicas=settings.replicas)
        else:
            await js.update_stream(config)
    await provision_consumers(js)
