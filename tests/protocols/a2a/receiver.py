"""A push-notification receiver as an A2A client runs one: a real HTTP server on loopback
that keeps each request's headers and its body read as the SDK reads a `StreamResponse`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from a2a.types import StreamResponse
from google.protobuf.json_format import Parse, ParseError

from tests.protocols.webhooks.receiver import read_request


@dataclass(frozen=True)
class Pushed:
    headers: dict[str, str]
    event: StreamResponse


@dataclass
class Receiver:
    url: str = ""
    requests: list[Pushed] = field(default_factory=list)
    # Bodies that were no `StreamResponse`, with the reason (answered 400).
    refused: list[str] = field(default_factory=list)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def until(
        self, seen: Callable[[list[Pushed]], bool], timeout: float = 30.0
    ) -> list[Pushed]:
        """Wait until what arrived satisfies `seen`; all of it."""
        async with asyncio.timeout(timeout), self.arrived:
            await self.arrived.wait_for(lambda: seen(self.requests))
        return list(self.requests)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            headers, body = await read_request(reader)
            try:
                event = Parse(body.decode(), StreamResponse())
            except ParseError as e:
                self.refused.append(str(e))
                status = b"400 Bad Request"
            else:
                async with self.arrived:
                    self.requests.append(Pushed(headers, event))
                    self.arrived.notify_all()
                status = b"204 No Content"
            writer.write(b"HTTP/1.1 %s\r\nConnection: close\r\n\r\n" % status)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the sender went away mid-request
        finally:
            writer.close()


@asynccontextmanager
async def receiving() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    server = await asyncio.start_server(receiver._serve, "127.0.0.1", 0)
    receiver.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/a2a-push"
    async with server:
        yield receiver
        server.close()
