"""Settings read from the environment, with embedded defaults."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from agency.contracts.partitions import MAX_PARTITIONS

SyncInterval = str  # "always", "default" (the server's 2 min) or a duration like "1s"


@dataclass(frozen=True, slots=True)
class InfraSettings:
    """`NATS_URL` / `DATABASE_URL` switch to external servers; otherwise both are embedded.

    `AGENCY_NATS_SYNC` sets JetStream's fsync interval for the embedded server. It defaults
    to `always`: an acknowledged event survives power loss. `default` keeps the server's
    two-minute interval, about 8x faster appends, for throwaway data.

    `AGENCY_NATS_MEMORY_LIMIT` (default `256MiB`; `off` for none) is the embedded server's
    soft memory limit (Go's `GOMEMLIMIT`; a `GOMEMLIMIT` in the environment wins): near it the
    server collects garbage sooner and hands freed memory back. Without it, the server with
    10,000 parked threads kept about 2x its live memory.

    `AGENCY_NATS_GOGC` (default `50`; `off` for Go's 100) is the embedded server's `GOGC` (a
    `GOGC` in the environment wins): its heap grows to 1.5x what is live before a collection
    instead of 2x, which is most of what a burst of threads left it holding.

    `AGENCY_NATS_PROFILE_PORT` (unset by default) serves the embedded server's Go profiles
    (`/debug/pprof/…`, nats-server's `prof_port`) on that port of the loopback interface:
    where its memory goes (`docs/performance.md`, "Parked threads"). For measuring only.

    `AGENCY_EVENT_PARTITIONS` (default `1`) is how many streams the events log is spread
    over, chosen when the store is provisioned (docs/scaling.md): each aggregate's events
    stay in the partition of its id's hash. A start asking for another count than the store
    was provisioned with is refused.

    `AGENCY_POSTGRES_SHARED_BUFFERS` (default `32MB`) is the embedded PostgreSQL's
    `shared_buffers`: its cache of table pages, held for good once touched (the kernel's
    page cache keeps what it does not, and gives it back under pressure). At 128MB, 10,000
    parked threads took PostgreSQL from 48 to 183 MB; at 32MB, to 88.
    """

    nats_url: str | None
    database_url: str | None
    nats_sync_interval: SyncInterval
    nats_port: int
    pg_port: int
    stream_replicas: int
    log_format: Literal["json", "console", "auto"]
    nats_memory_limit: str | None = "256MiB"
    nats_gc_percent: int | None = 50
    pg_shared_buffers: str = "32MB"
    nats_profile_port: int | None = None
    event_partitions: int = 1

    @classmethod
    def from_env(cls) -> InfraSettings:
        return cls(
            nats_url=os.environ.get("NATS_URL") or None,
            database_url=os.environ.get("DATABASE_URL") or None,
            nats_sync_interval=os.environ.get("AGENCY_NATS_SYNC", "always"),
            nats_port=int(os.environ.get("AGENCY_NATS_PORT", "0")),
            pg_port=int(os.environ.get("AGENCY_PG_PORT", "0")),
            stream_replicas=int(os.environ.get("AGENCY_STREAM_REPLICAS", "1")),
            log_format=_log_format(os.environ.get("AGENCY_LOG_FORMAT", "auto")),
            nats_memory_limit=_memory_limit(os.environ.get("AGENCY_NATS_MEMORY_LIMIT", "256MiB")),
            nats_gc_percent=_gc_percent(os.environ.get("AGENCY_NATS_GOGC", "50")),
            pg_shared_buffers=_pg_size(os.environ.get("AGENCY_POSTGRES_SHARED_BUFFERS", "32MB")),
            nats_profile_port=_port(os.environ.get("AGENCY_NATS_PROFILE_PORT", "")),
            event_partitions=_partitions(os.environ.get("AGENCY_EVENT_PARTITIONS", "1")),
        )


_GO_SIZE = re.compile(r"^[0-9]+(B|KiB|MiB|GiB|TiB)?$")


def _memory_limit(value: str) -> str | None:
    if value.strip().lower() in ("", "off"):
        return None
    if not _GO_SIZE.match(value.strip()):
        raise ValueError(
            f"AGENCY_NATS_MEMORY_LIMIT={value!r}: give bytes with an optional unit "
            "(B, KiB, MiB, GiB, TiB), such as 256MiB, or off"
        )
    return value.strip()


_PG_SIZE = re.compile(r"^[0-9]+(kB|MB|GB|TB)?$")


def _pg_size(value: str) -> str:
    if not _PG_SIZE.match(value.strip()):
        raise ValueError(
            f"AGENCY_POSTGRES_SHARED_BUFFERS={value!r}: give a size with an optional unit "
            "(kB, MB, GB, TB), such as 128MB"
        )
    return value.strip()


def _port(value: str) -> int | None:
    if value.strip().lower() in ("", "off"):
        return None
    if not value.strip().isdigit() or not 0 < int(value) < 65536:
        raise ValueError(f"AGENCY_NATS_PROFILE_PORT={value!r}: give a port, such as 65432, or off")
    return int(value)


def event_partitions_from_env() -> int:
    """`AGENCY_EVENT_PARTITIONS` (1 when unset)."""
    return _partitions(os.environ.get("AGENCY_EVENT_PARTITIONS", "1"))


def _partitions(value: str) -> int:
    if not value.strip().isdigit() or not 1 <= int(value) <= MAX_PARTITIONS:
        raise ValueError(
            f"AGENCY_EVENT_PARTITIONS={value!r}: give a count of partitions from 1 to "
            f"{MAX_PARTITIONS}, such as 3 on a 3-node cluster"
        )
    return int(value)


def _gc_percent(value: str) -> int | None:
    if value.strip().lower() in ("", "off"):
        return None
    if not value.strip().isdigit() or int(value) == 0:
        raise ValueError(f"AGENCY_NATS_GOGC={value!r}: give a percent above 0, such as 50, or off")
    return int(value)


def _log_format(value: str) -> Literal["json", "console", "auto"]:
    if value == "json":
        return "json"
    if value == "console":
        return "console"
    return "auto"
