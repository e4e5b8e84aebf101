"""Settings read from the environment, with embedded defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

SyncInterval = str  # "always", "default" (the server's 2 min) or a duration like "1s"


@dataclass(frozen=True, slots=True)
class InfraSettings:
    """`NATS_URL` / `DATABASE_URL` switch to external servers; otherwise both are embedded.

    `AGENCY_NATS_SYNC` sets JetStream's fsync interval for the embedded server. It defaults
    to `always`: an acknowledged event survives power loss. `default` keeps the server's
    two-minute interval, about 8x faster appends, for throwaway data.
    """

    nats_url: str | None
    database_url: str | None
    nats_sync_interval: SyncInterval
    nats_port: int
    pg_port: int
    stream_replicas: int
    log_format: Literal["json", "console", "auto"]

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
        )


def _log_format(value: str) -> Literal["json", "console", "auto"]:
    if value == "json":
        return "json"
    if value == "console":
        return "console"
    return "auto"
