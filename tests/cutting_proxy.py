"""An HTTP proxy in front of the API that cuts event streams mid-run (the TCP connection
reset after a given frame, as a proxy timeout or a dropped network does) or rewrites `Host`
(as nginx's plain `proxy_pass` does); what the tests of every protocol's client share.

The proxy speaks HTTP/1.1 to the client and one request per connection upstream (it asks
the API to close after each answer, as nginx's default HTTP/1.0 upstream does), so that it
sees every request head: the one it rewrites, and the ones a test asserts on (`Last-Event-ID`
on a reconnect, the path the client reconnected to).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field


@dataclass
class Seen:
    """A request as it reached the proxy (before any rewrite)."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Proxy:
    """An HTTP proxy in front of `target` (`http://host:port`).

    `host`: the `Host` sent upstream instead of the client's (nginx's `proxy_pass
    http://agency;` sends `Host: agency`, its upstream's name, and no X-Forwarded-*).
    `cut_after`: an event stream is cut (the TCP connection reset) right after its
    `cut_after`-th frame, for the first `cuts` event streams through the proxy.
    """

    target: str
    host: str | None = None
    cut_after: int = 0
    cuts: int = 0
    seen: list[Seen] = field(default_factory=list)
    cut: int = 0
    # The id of the last frame the client got before each cut.
    cut_ids: list[str | None] = field(default_factory=list)
    url: str = ""
    _server: asyncio.Server | None = None
    _open: set[asyncio.StreamWriter] = field(default_factory=set)

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in list(self._open):
            writer.transport.abort()
        if self._server is not None:
            self._server.close()
            await asyncio.wait_for(self._server.wait_closed(), timeout=5)

    def streams(self) -> list[Seen]:
        """The requests that asked for an event stream, in order."""
        return [s for s in self.seen if s.path.split("?")[0].endswith("/stream")]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            self._open.discard(writer)
            writer.transport.abort()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Forward one request and its answer; whether the client's connection stays open."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        line, *lines = head.decode("latin-1").split("\r\n")[:-2]
        method, path, _ = line.split(" ", 2)
        headers = [tuple(h.split(":", 1)) for h in lines]
        names = {k.strip().lower(): v.strip() for k, v in headers}
        self.seen.append(Seen(method, path, names))
        body = b""
        if "content-length" in names:
            body = await reader.readexactly(int(names["content-length"]))
        elif names.get("transfer-encoding", "").lower() == "chunked":
            body = await _read_chunked(reader)
            headers = [h for h in headers if h[0].strip().lower() != "transfer-encoding"]
            headers.append(("Content-Length", f" {len(body)}"))
        out = []
        for name, value in headers:
            low = name.strip().lower()
            if low in ("connection", "keep-alive", "proxy-connection"):
                continue
            if low == "host" and self.host is not None:
                value = " " + self.host
            out.append(f"{name}:{value}")
        out.append("Connection: close")
        host, port = self.target.removeprefix("http://").split(":")
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        self._open.add(up_writer)
        try:
            up_writer.write(("\r\n".join([line, *out]) + "\r\n\r\n").encode("latin-1") + body)
            await up_writer.drain()
            return await self._answer(up_reader, writer, keep=names.get("connection") != "close")
        finally:
            self._open.discard(up_writer)
            up_writer.transport.abort()

    async def _answer(
        self, up: asyncio.StreamReader, writer: asyncio.StreamWriter, keep: bool
    ) -> bool:
        head = await up.readuntil(b"\r\n\r\n")
        status, *lines = head.decode("latin-1").split("\r\n")[:-2]
        names = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in lines)}
        sse = names.get("content-type", "").startswith("text/event-stream")
        chunked = names.get("transfer-encoding", "").lower() == "chunked"
        length = names.get("content-length")
        # The answer is delimited for the client as the API delimited it; without a length
        # or chunks it ends when the API closes, and so does the client's connection.
        keep = keep and (chunked or length is not None)
        kept = [h for h in lines if h.split(":", 1)[0].strip().lower() != "connection"]
        kept.append("Connection: keep-alive" if keep else "Connection: close")
        writer.write(("\r\n".join([status, *kept]) + "\r\n\r\n").encode("latin-1"))
        cutting = sse and self.cut < self.cuts and self.cut_after > 0
        frames = 0
        pending = b""
        last: bytes | None = None  # the id of the last frame forwarded
        if length is not None:
            remaining = int(length)
            while remaining:
                data = await up.read(min(remaining, 65536))
                if not data:
                    raise ConnectionError("the API closed mid-answer")
                remaining -= len(data)
                writer.write(data)
                await writer.drain()
            return keep
        while data := await up.read(65536):
            if cutting:
                # Frames end with a blank line; the chunk framing uses \r\n, never \n\n.
                # The cut falls between two events: after the frame that reaches
                # `cut_after`, the frames of the same event (same id) that came with it
                # go too.
                pending += data
                while (end := pending.find(b"\n\n")) >= 0:
                    frame_id = _frame_id(pending[: end + 2])
                    if frames >= self.cut_after and (frame_id is None or frame_id != last):
                        break
                    writer.write(pending[: end + 2])
                    pending = pending[end + 2 :]
                    frames += 1
                    last = frame_id if frame_id is not None else last
                if frames >= self.cut_after:
                    await writer.drain()
                    self.cut += 1
                    self.cut_ids.append(last.decode() if last is not None else None)
                    writer.transport.abort()
                    return False
                continue
            writer.write(data)
            await writer.drain()
        writer.write(pending)
        await writer.drain()
        return keep and chunked


_ID = re.compile(rb"(?m)^id: ?(\S+)")


def _frame_id(frame: bytes) -> bytes | None:
    found = _ID.search(frame)
    return found.group(1) if found else None


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        body += (await reader.readexactly(size + 2))[:-2]
        if size == 0:  # no trailers: the last chunk's CRLF ends the body
            return body
