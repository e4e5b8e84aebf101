"""A small HTTP reverse proxy in front of the API, as clients meet one: it forwards each
request on a connection of its own (`Connection: close` upstream, as nginx's plain
`proxy_pass` does), may rewrite `Host` to the upstream's address (nginx's default
`proxy_set_header Host $proxy_host`), can cut every response it is relaying, as a proxy
timeout or a dropped network does, and can send what follows to another server. With a
`prefix` it serves the API under that path, as an operator mounts Agency beside other
apps: it strips the prefix and says what the client asked for in `X-Forwarded-Prefix`,
`-Host`, `-Proto` and `-For`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

HEAD_LIMIT = 64 * 1024


class Proxy:
    def __init__(self, upstream: str, *, rewrite_host: bool = False, prefix: str = "") -> None:
        self._upstream = _address(upstream)
        self._rewrite_host = rewrite_host or bool(prefix)
        self._prefix = prefix.encode()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self.requests: list[bytes] = []  # each request's first line, as forwarded
        self.sent_to: list[tuple[str, int]] = []  # and the server it went to
        self.cuts = 0

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        if self._server is not None:
            async with asyncio.timeout(10):
                await self._server.wait_closed()

    def retarget(self, upstream: str) -> None:
        """Send the next connections to another server (as a balancer does after one
        went away); those open go on."""
        self._upstream = _address(upstream)

    def cut(self) -> None:
        """Abort every connection the proxy holds, both sides: responses end mid-stream."""
        self.cuts += 1
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    def _head(self, raw: bytes) -> bytes:
        lines = raw.split(b"\r\n")
        kept = [self._strip_prefix(lines[0])]
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"host" and self._prefix:
                kept.append(b"X-Forwarded-Host: " + value.strip())
            if name.strip().lower() == b"connection" or (
                self._rewrite_host and name.strip().lower() == b"host"
            ):
                continue
            kept.append(line)
        if self._prefix:
            kept[1:1] = [
                b"X-Forwarded-Prefix: " + self._prefix,
                b"X-Forwarded-Proto: https",
                b"X-Forwarded-For: 203.0.113.7",
            ]
        if self._rewrite_host:
            host, port = self._upstream
            kept.insert(1, b"Host: %s:%d" % (host.encode(), port))
        kept.insert(1, b"Connection: close")
        return b"\r\n".join(kept)

    def _strip_prefix(self, line: bytes) -> bytes:
        return _strip(line, self._prefix) if self._prefix else line

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._open.add(client_w)
        upstream_w: asyncio.StreamWriter | None = None
        try:
            raw = await client_r.readuntil(b"\r\n\r\n")
            if len(raw) > HEAD_LIMIT:
                return
            head = self._head(raw[:-4]) + b"\r\n\r\n"
            self.requests.append(head.split(b"\r\n", 1)[0])
            self.sent_to.append(self._upstream)
            upstream_r, upstream_w = await asyncio.open_connection(*self._upstream)
            self._open.add(upstream_w)
            upstream_w.write(head)
            body = asyncio.create_task(_pipe(client_r, upstream_w))
            try:
                await _pipe(upstream_r, client_w)  # the response, to its end or a cut
            finally:
                body.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await body
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            for writer in (client_w, upstream_w):
                if writer is not None:
                    self._open.discard(writer)
                    writer.transport.abort()


def _strip(line: bytes, prefix: bytes) -> bytes:
    """The request line with `prefix` taken off its path (a path outside it unchanged)."""
    method, _, rest = line.partition(b" ")
    path, _, version = rest.partition(b" ")
    if path == prefix or path.startswith((prefix + b"/", prefix + b"?")):
        path = path[len(prefix) :] or b"/"
        if path.startswith(b"?"):
            path = b"/" + path
    return b" ".join((method, path, version))


def _address(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").partition(":")
    return host, int(port)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    # The request's body is sent (or the response is over): close that side.
    with contextlib.suppress(OSError):
        if writer.can_write_eof():
            writer.write_eof()


@contextlib.asynccontextmanager
async def proxy(
    upstream: str, *, rewrite_host: bool = False, prefix: str = ""
) -> AsyncIterator[Proxy]:
    running = Proxy(upstream, rewrite_host=rewrite_host, prefix=prefix)
    await running.start()
    try:
        yield running
    finally:
        await running.close()
