"""Outbound connections made for a tenant: public addresses only, unless the operator allows.

A URL a tenant can name (an MCP server in a blueprint's `config.mcpServers`, inline in a
workflow's agents, or an app's `McpServer`; a remote A2A agent's card in
`config.remoteAgents`) must not reach what sits behind our network:
loopback, link-local (cloud metadata at 169.254.169.254), private ranges, unspecified,
multicast and other non-public addresses are refused, and so are the ports of the system's
own services (NATS, PostgreSQL, the NATS server's profiling port) on such an address. The
operator allows hosts or ranges with `AGENCY_ALLOW_HOSTS` (comma-separated hostnames, IP
addresses, CIDR ranges):

    AGENCY_ALLOW_HOSTS="mcp.internal,10.8.0.0/16,127.0.0.1"

Three places hold the wall: `refusal` on save (a literal address, or `localhost`, is a 400
naming the field), `EgressPolicy.check` before a connection opens (the name resolved, every
address it has checked: a clear error instead of a connection), and `guarded_transport`,
the HTTP transport whose every TCP connection (redirects included) resolves the name,
checks the addresses and connects to the address it checked, so a name cannot resolve to
a public address for the check and to a private one for the connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpcore
import httpcore2
import httpx
import httpx2
import msgspec
from httpcore._backends.auto import AutoBackend as AutoBackend1
from httpcore2._backends.auto import AutoBackend

VARIABLE = "AGENCY_ALLOW_HOSTS"
RESOLVE_TIMEOUT = 10.0

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefused(Exception):
    """A connection made for a tenant would reach an address it may not."""

    def __init__(self, target: str, reason: str) -> None:
        self.target = target
        self.reason = reason
        super().__init__(f"connection to {target} refused: {reason}")


class EgressPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """`hosts` (lower-case names) and `networks` the operator allows; `own_ports` the ports
    of the system's own services, refused on any non-public address even when allowed."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()
    own_ports: frozenset[int] = frozenset()

    @classmethod
    def parse(cls, text: str, own_urls: Iterable[str] = ()) -> EgressPolicy:
        hosts: set[str] = set()
        networks: list[Network] = []
        for raw in text.split(","):
            item = raw.strip().lower()
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item.strip("[]"), strict=False))
            except ValueError:
                if not item.replace("-", "").replace(".", "").replace("_", "").isalnum():
                    raise ValueError(
                        f"{VARIABLE}: {item[:80]!r} is neither a hostname, an IP address nor "
                        "a CIDR range"
                    ) from None
                hosts.add(item.rstrip("."))
        ports = frozenset(p for p in map(_port, own_urls) if p is not None)
        return cls(hosts=frozenset(hosts), networks=tuple(networks), own_ports=ports)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, own_urls: Iterable[str] = ()
    ) -> EgressPolicy:
        """`AGENCY_ALLOW_HOSTS`; the system's own ports from `own_urls`, the `NATS_URL` /
        `DATABASE_URL` set in the environment, and the embedded NATS server's profiling
        port (`AGENCY_NATS_PROFILE_PORT`) where one is served."""
        env = os.environ if environ is None else environ
        urls = [*own_urls, *(env.get(k, "") for k in ("NATS_URL", "DATABASE_URL"))]
        if (profile := env.get("AGENCY_NATS_PROFILE_PORT", "").strip()).isdigit():
            urls.append(f"http://127.0.0.1:{profile}")
        own = [u.strip() for url in urls for u in url.split(",") if u.strip()]
        return cls.parse(env.get(VARIABLE, ""), own)

    def allows_name(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def address_refusal(self, address: Address, port: int | None, *, named: bool) -> str | None:
        """Why `address` (reached through a host the operator allows when `named`) may not
        be connected to for a tenant, or None."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        public = address.is_global and not address.is_multicast
        if public:
            return None
        if port is not None and port in self.own_ports:
            return f"port {port} on {address} belongs to this system's own services"
        if named or any(address in n for n in self.networks if n.version == address.version):
            return None
        return (
            f"{address} is a {_kind(address)} address, which connections made for a tenant "
            f"may not reach (the operator allows hosts with {VARIABLE})"
        )

    async def check(self, host: str, port: int, timeout: float = RESOLVE_TIMEOUT) -> str:
        """The address to connect to for `host`: every address the name has is checked.
        `EgressRefused` names the first one refused, or a name that does not resolve."""
        literal = _literal(host)
        if literal is not None:
            problem = self.address_refusal(literal, port, named=False)
            if problem is not None:
                raise EgressRefused(f"{host}:{port}", problem)
            return str(literal)
        try:
            async with asyncio.timeout(timeout):
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
        except (OSError, TimeoutError) as e:
            raise EgressRefused(f"{host}:{port}", f"the name does not resolve ({e})") from None
        named = self.allows_name(host)
        addresses = list(dict.fromkeys(ipaddress.ip_address(i[4][0]) for i in infos))
        for address in addresses:
            problem = self.address_refusal(address, port, named=named)
            if problem is not None:
                raise EgressRefused(f"{host}:{port}", f"{host} resolves to {address}: {problem}")
        if not addresses:
            raise EgressRefused(f"{host}:{port}", "the name has no address")
        return str(addresses[0])

    async def check_url(self, url: str) -> None:
        """Resolve and check the URL's host, before a connection is opened."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EgressRefused(url[:200], "only http(s) URLs with a host are allowed")
        await self.check(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))


def refusal(url: str, policy: EgressPolicy | None = None) -> str | None:
    """Why a URL a tenant saves is refused as it is written (an address, or `localhost`,
    that no connection for a tenant may reach), or None; names are resolved on connecting."""
    policy = EgressPolicy.from_env() if policy is None else policy
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        return "the URL has no host"
    if policy.allows_name(host):
        return None
    literal = _literal(host)
    if literal is None and (host == "localhost" or host.endswith(".localhost")):
        literal = ipaddress.ip_address("127.0.0.1")
    if literal is None:
        return None
    try:
        port = parts.port
    except ValueError:
        return "the URL's port is not a number from 0 to 65535"
    return policy.address_refusal(literal, port, named=False)


class _Server(Protocol):
    @property
    def url(self) -> str: ...


def server_refusals(servers: Iterable[_Server]) -> Iterator[tuple[int, str, str]]:
    """Each MCP server of a blueprint's config whose URL is refused as written (`refusal`):
    its index, its URL (cut to 200 characters) and why. The one check of every way a
    blueprint comes in (HTTP, NATS, a workflow's member, an inline subagent); a stdio
    server (no URL) is the operator's only, refused elsewhere (`McpServer.operator_only`)."""
    for i, server in enumerate(servers):
        problem = refusal(server.url) if server.url else None
        if problem is not None:
            yield i, server.url[:200], problem


def guarded_transport(policy: EgressPolicy) -> httpx2.AsyncHTTPTransport:
    """An HTTP transport that connects only where `policy` allows, to the address it
    checked; proxies from the environment are not used (they would connect instead)."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False),
        network_backend=_GuardedBackend(policy),
    )
    return transport


def guarded_httpx_transport(policy: EgressPolicy) -> httpx.AsyncHTTPTransport:
    """`guarded_transport` for clients built on `httpx` 1 (the A2A SDK's)."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        network_backend=_GuardedBackend1(policy),
    )
    return transport


class _Guard:
    """The checks before each connection, for `httpcore` 1 and 2 alike (their backends have
    the same members): the address the policy checked is the one connected to."""

    def __init__(self, policy: EgressPolicy, inner: Any) -> None:
        self._policy = policy
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        # TLS is started afterwards with the origin's name, so certificates check as usual.
        address = await self._policy.check(host, port, timeout or RESOLVE_TIMEOUT)
        return await self._inner.connect_tcp(
            address, port, timeout=timeout, local_address=local_address,
            socket_options=socket_options,
        )  # fmt: skip

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> Any:
        raise EgressRefused(path, "connections made for a tenant never use a local socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _GuardedBackend(_Guard, httpcore2.AsyncNetworkBackend):
    def __init__(self, policy: EgressPolicy) -> None:
        super().__init__(policy, AutoBackend())


class _GuardedBackend1(_Guard, httpcore.AsyncNetworkBackend):
    def __init__(self, policy: EgressPolicy) -> None:
        super().__init__(policy, AutoBackend1())


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _kind(address: Address) -> str:
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    return "non-public"


def _port(url: str) -> int | None:
    try:
        return urlsplit(url if "://" in url else f"tcp://{url}").port
    except ValueError:
        return None
