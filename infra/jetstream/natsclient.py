"""nats-py's client, closing the connections its failed attempts leave open.

nats-py 2.16 keeps one transport object per client and connects it again for each attempt.
Its reconnect loop does not close an attempt that failed after the socket opened (the
server's INFO came later than `connect_timeout`), so the next attempt drops that socket
unclosed: a file descriptor held until the garbage collector finds it, and a
`ResourceWarning` then. A failed first connect without reconnects leaves its socket open
the same way. This client closes the earlier attempt before each new one, and `connect`
closes a client whose first connect failed.
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client as _NatsClient, Srv


class Client(_NatsClient):
    async def _connect_to_server(self, s: Srv) -> None:
        if self._transport:  # an earlier attempt's connection: open or already closed
            self._transport.close()  # type: ignore[no-untyped-call]
        await super()._connect_to_server(s)


async def connect(servers: str | list[str], **options: Any) -> Client:
    """`nats.connect`, with this client; a failed connect leaves nothing open."""
    nc = Client()
    try:
        await nc.connect(servers, **options)
    except BaseException:
        await nc.close()
        raise
    return nc
