"""The infrastructure a running system needs: NATS and PostgreSQL, embedded or external.

`Infrastructure` starts what is not given as a URL, provisions the streams and applies the
migrations, and stops what it started, in reverse order, on exit. Provisioning and
migrations are idempotent and safe under concurrent starts, and a start cut short at any
point leaves nothing that stops the next one.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import structlog

from agency.infra.db import migrate_database
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.streams import StreamSettings, provision
from agency.infra.launch import NatsServer, PostgresServer
from agency.infra.nats_auth import NatsAuth, without_credentials
from agency.infra.settings import InfraSettings

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class InfraUrls:
    nats_url: str
    database_url: str
    embedded_nats: bool
    embedded_postgres: bool
    # The users of the embedded NATS; None for an external server (its own credentials).
    nats_auth: NatsAuth | None = None

    def nats_url_for(self, role: str) -> str:
        """The URL a service of `role` connects with (its own user on the embedded server)."""
        if self.nats_auth is None:
            return self.nats_url
        return self.nats_auth.url(without_credentials(self.nats_url), role)


class Infrastructure:
    def __init__(self, data_dir: Path, settings: InfraSettings) -> None:
        self._data_dir = data_dir
        self._settings = settings
        self._stack = AsyncExitStack()
        self.urls: InfraUrls | None = None

    async def __aenter__(self) -> InfraUrls:
        try:
            return await self._start()
        except BaseException:
            await self._stack.aclose()
            raise

    async def _start(self) -> InfraUrls:
        s = self._settings
        self._data_dir.mkdir(parents=True, exist_ok=True)
        nats_url = s.nats_url
        nats_auth: NatsAuth | None = None
        if nats_url is None:
            nats = await self._stack.enter_async_context(
                NatsServer(
                    self._data_dir / "nats",
                    port=s.nats_port,
                    sync_interval=s.nats_sync_interval,
                    auth=True,
                    memory_limit=s.nats_memory_limit,
                    gc_percent=s.nats_gc_percent,
                    profile_port=s.nats_profile_port,
                    event_partitions=s.event_partitions,
                )
            )
            nats_url, nats_auth = nats.admin_url, nats.auth
        database_url = s.database_url
        if database_url is None:
            pg = await self._stack.enter_async_context(
                PostgresServer(
                    self._data_dir / "postgres",
                    port=s.pg_port,
                    settings={"shared_buffers": s.pg_shared_buffers},
                )
            )
            database_url = pg.url
        async with Bus(nats_url, name="agency-provision") as bus:
            streams = StreamSettings(replicas=s.stream_replicas, partitions=s.event_partitions)
            await provision(bus.js, streams, nc=bus.nc)
        await migrate_database(database_url)
        self.urls = InfraUrls(
            nats_url=nats_url,
            database_url=database_url,
            embedded_nats=s.nats_url is None,
            embedded_postgres=s.database_url is None,
            nats_auth=nats_auth,
        )
        return self.urls

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stack.aclose()
