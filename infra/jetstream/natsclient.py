"""nats-py's client, closing the connections its failed attempts leave open.

nats-py 2.16 keeps one transport object per client and connects it again for each attempt.
Its reconnect loop does not close an attempt that failed after the socket opened (the
server's INFO came later than `connect_timeout`), so the next attempt drops that socket
unclosed: a file descriptor held until the garbage collector finds it, and a
`ResourceWarning` then. A failed first connect without reconnects leaves its socket open
the same way. This client closes the earlier attempt before each new one, and `connect`
closes a client whose first connect failed.

A cluster's servers tell the client of each other (`connect_urls`), by address and without
credentials, and nats-py adds each to its pool; it then signs in to them with its
options' credentials, not with those of the URL it was given. So `connect` passes the
user and password of the URLs (when they agree and no other are given) as options: a
client that reconnects to a server it was told of signs in as to the others, instead of
meeting an authorization violation there first.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlparse

from nats.aio.client import Client as _NatsClient, Srv


class Client(_NatsClient):
    async def _connect_to_server(self, s: Srv) -> None:
        if self._transport:  # an earlier attempt's connection: open or already closed
            self._transport.close()  # type: ignore[no-untyped-call]
        await super()._connect_to_server(s)


def url_credentials(servers: str | list[str]) -> dict[str, str]:
    """`user` and `password` options from the servers' URLs, when all of them carry the
    same pair; else none."""
    urls = servers.split(",") if isinstance(servers, str) else servers
    pairs = {
        (unquote(u.username), unquote(u.password or ""))
        for u in (
            urlparse(url if "://" in url else f"nats://{url}") for url in map(str.strip, urls)
        )
        if u.username is not None
    }
    if len(pairs) != 1:
        return {}
    ((user, password),) = pairs
    return {"user": user, "password": password} if password else {}


async def connect(servers: str | list[str], **options: Any) -> Client:
    """`nats.connect`, with this client; a failed connect leaves nothing open."""
    if not {"user", "password", "token", "user_credentials", "nkeys_seed"} & options.keys():
        options |= url_credentials(servers)
    nc = Client()
    try:
        await nc.connect(servers, **options)
    except BaseException:
        await nc.close()
        raise
    return nc
