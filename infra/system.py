"""The infrastructure a running system needs: NATS and PostgreSQL, embedded or external.

`Infrastructure` starts what is not given as a URL, provisions the streams and applies the
migrations, and stops what it started, in reverse order, on exit.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import asyncpg
import structlog

from infra.db import migrate
from infra.jetstream.connection import Bus
from infra.jetstream.streams import StreamSettings, provision
from infra.launch import NatsServer, PostgresServer
from infra.settings import InfraSettings

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class InfraUrls:
    nats_url: str
    database_url: str
    embedded_nats: bool
    embedded_postgres: bool


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
        if nats_url is None:
            nats = await self._stack.enter_async_context(
                NatsServer(
                    self._data_dir / "nats", port=s.nats_port, sync_interval=s.nats_sync_interval
                )
            )
            nats_url = nats.url
        database_url = s.database_url
        if database_url is None:
            pg = await self._stack.enter_async_context(
                PostgresServer(self._data_dir / "postgres", port=s.pg_port)
            )
            database_url = pg.url
        async with Bus(nats_url, name="agency-provision") as bus:
            await provision(bus.js, StreamSettings(replicas=s.stream_replicas))
        conn = await asyncpg.connect(database_url, timeout=10)
        try:
            await migrate(conn)
        finally:
            await conn.close(timeout=5)
        self.urls = InfraUrls(
            nats_url=nats_url,
            database_url=database_url,
            embedded_nats=s.nats_url is None,
            embedded_postgres=s.database_url is None,
        )
        return self.urls

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()
