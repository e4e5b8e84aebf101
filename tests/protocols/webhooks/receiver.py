"""A webhook receiver as an integrator writes one: a real HTTP server on loopback that
verifies each delivery with the `standardwebhooks` library, answers with the statuses it is
told to, and deduplicates by `webhook-id`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class Received:
    id: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class Receiver:
    url: str = ""
    secret: str = ""
    # The status of each next request (then 200).
    statuses: list[int] = field(default_factory=list)
    # While set, requests are held unanswered (a receiver that is slow to answer).
    hold: asyncio.Event | None = None
    # Every verified request, in arrival order (duplicates included).
    requests: list[Received] = field(default_factory=list)
    # Requests whose signature did not verify, with the reason.
    refused: list[str] = field(default_factory=list)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    def unique(self) -> dict[str, Received]:
        """What an integrator keeps: one delivery per `webhook-id`."""
        return {r.id: r for r in self.requests}

    async def until(self, count: int, timeout: float = 30.0) -> dict[str, Received]:
        """Wait until `count` distinct deliveries have arrived; those."""
        async with asyncio.timeout(timeout), self.arrived:
            await self.arrived.wait_for(lambda: len(self.unique()) >= count)
        return self.unique()

    async def until_requests(self, count: int, timeout: float = 30.0) -> list[Received]:
        """Wait until `count` requests (duplicates and retries counted) have arrived."""
        async with asyncio.timeout(timeout), self.arrived:
            await self.arrived.wait_for(lambda: len(self.requests) >= count)
        return list(self.requests)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            headers, body = await read_request(reader)
            status = await self._answer(headers, body)
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the sender went away mid-request (it was stopped)
        finally:
            writer.close()

    async def _answer(self, headers: dict[str, str], body: bytes) -> int:
        try:
            parsed = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError as e:
            self.refused.append(str(e))
            return 400
        async with self.arrived:
            self.requests.append(Received(headers["webhook-id"], parsed, headers))
            self.arrived.notify_all()
        if self.hold is not None:
            await self.hold.wait()
        return self.statuses.pop(0) if self.statuses else 200


@asynccontextmanager
async def receiving(host: str = "127.0.0.1", name: str | None = None) -> AsyncIterator[Receiver]:
    """A receiver listening on `host`, its URL naming `name` (by default `host`)."""
    receiver = Receiver()
    server = await asyncio.start_server(receiver._serve, host, 0)
    receiver.url = f"http://{name or host}:{server.sockets[0].getsockname()[1]}/hooks"
    async with server:
        yield receiver
        server.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[dict[str, str], bytes]:
    """One HTTP/1.1 request's headers (names in lower case) and body, as a receiver reads
    it: the sender names the body's length."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")[1:]
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines if ln)
    }
    return headers, await reader.readexactly(int(headers.get("content-length", "0")))
