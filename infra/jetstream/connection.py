"""One NATS connection per process, with the event store, command bus and dead letters."""

from __future__ import annotations

import asyncio

import nats.errors
import structlog
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from agency.contracts.partitions import EventLayout
from agency.infra.jetstream.commandbus import CommandBus
from agency.infra.jetstream.deadletter import DeadLetters
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.headerparse import install as install_header_parser
from agency.infra.jetstream.natsclient import connect as nats_connect
from agency.infra.jetstream.partitions import discover_layout
from agency.infra.keystore import ensure_cipher, release_cipher
from agency.infra.keystore.cipher import ThreadCipher
from agency.infra.settings import event_partitions_from_env

log = structlog.get_logger(__name__)

_CONNECTION_ERRORS = (
    OSError,
    nats.errors.UnexpectedEOF,
    nats.errors.StaleConnectionError,
    nats.errors.ConnectionClosedError,
    nats.errors.NoServersError,
)


class Bus:
    """Async context manager owning the connection; `close()` drains within a bound."""

    def __init__(
        self,
        url: str,
        *,
        name: str = "agency",
        drain_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        layout: EventLayout | None = None,
    ) -> None:
        """`layout`: the events log's partitions; found on the provisioned streams when
        not given (`partitions.py`)."""
        self._url = url
        self._layout = layout
        self._name = name
        self._connect_timeout = connect_timeout
        self._drain_timeout = drain_timeout
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self.store: EventStore
        self.commands: CommandBus
        self.dead_letters: DeadLetters
        self._cipher: ThreadCipher | None = None

    @property
    def nc(self) -> NATS:
        assert self._nc is not None, "Bus is not connected"
        return self._nc

    @property
    def js(self) -> JetStreamContext:
        assert self._js is not None, "Bus is not connected"
        return self._js

    async def connect(self) -> Bus:
        install_header_parser()
        servers = [u.strip() for u in self._url.split(",") if u.strip()]
        self._nc = await nats_connect(
            servers,
            name=self._name,
            connect_timeout=self._connect_timeout,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnected,
            reconnected_cb=self._on_reconnected,
        )
        self._js = self._nc.jetstream(timeout=6.0)
        # A thread's content is sealed and opened with keys from the key store (docs/data.md).
        self._cipher = ensure_cipher(self._url)
        try:
            layout = self._layout or await _discover(self._js, self._name)
        except BaseException:
            # A start cut short (cancelled, or the store unreadable) lets go of what it
            # opened: no connection left reconnecting, no cipher left installed.
            await asyncio.shield(self.close())
            raise
        self.store = EventStore(self._nc, self._js, layout=layout)
        self.commands = CommandBus(self._nc, self._js, layout=layout)
        self.dead_letters = DeadLetters(self._js)
        return self

    @property
    def layout(self) -> EventLayout:
        """The events log's partitions (`contracts/partitions.py`)."""
        return self.store.layout

    # The client's own callbacks log every failed reconnect attempt with a traceback: one
    # line each instead, an outage's lost connection and refused attempts as warnings.
    async def _on_error(self, error: Exception) -> None:
        described = f"{type(error).__name__}: {error}"
        if isinstance(error, _CONNECTION_ERRORS):
            log.warning("nats connection lost or refused", connection=self._name, error=described)
        else:
            log.error("nats error", connection=self._name, error=described)

    async def _on_disconnected(self) -> None:
        nc = self._nc
        if nc is None or nc.is_closed or nc.is_draining:
            return  # closed by us (`close` lets go of it first)
        log.warning("nats disconnected; reconnecting", connection=self._name)

    async def _on_reconnected(self) -> None:
        url = self._nc.connected_url if self._nc is not None else None
        log.info("nats reconnected", connection=self._name, server=url.netloc if url else "")

    async def close(self) -> None:
        cipher, self._cipher = self._cipher, None
        release_cipher(cipher)
        nc, self._nc = self._nc, None
        if nc is None or nc.is_closed:
            return
        try:
            await asyncio.wait_for(nc.drain(), timeout=self._drain_timeout)
        except (TimeoutError, nats.errors.Error):
            log.warning("drain did not finish in time, closing", timeout=self._drain_timeout)
            await nc.close()

    async def __aenter__(self) -> Bus:
        return await self.connect()

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.shield(self.close())


async def _discover(js: JetStreamContext, name: str) -> EventLayout:
    """The provisioned log's layout. Before the store is provisioned, or when the server
    cannot say (a user without the stream API, JetStream away), the configured count
    (`AGENCY_EVENT_PARTITIONS`): an append to a stream that is not there fails, it never
    lands in another."""
    configured = event_partitions_from_env()
    try:
        return await discover_layout(js, configured)
    except (nats.errors.Error, TimeoutError) as e:
        log.warning(
            "events log layout not found; taking the configured partitions",
            connection=name,
            partitions=configured,
            error=f"{type(e).__name__}: {e}",
        )
        return EventLayout(configured)
