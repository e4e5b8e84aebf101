"""What a reverse proxy the operator trusts says of a request (`AGENCY_TRUSTED_PROXIES`).

Behind a proxy the API sees the proxy's address, its own scheme and whatever `Host` the
proxy sends. A proxy the operator names (by address or network) may say what the client
asked for, in `X-Forwarded-For`, `X-Forwarded-Proto`, `X-Forwarded-Host` and
`X-Forwarded-Prefix` (the path the proxy serves Agency under, stripped before it passes
the request on). From a trusted peer they are applied before anything else reads the
request: the client's address (the nearest address in `X-Forwarded-For` that is not a
trusted proxy itself), the scheme, the `Host` header, and the prefix, which the pages
that name their own assets (the console, `/schema`) put in front of every path. From any
other peer they are ignored: a client cannot claim an address or a host.

The API's answers carry no absolute URL (`Location` is a path the SDKs join onto their
base URL) but where a protocol asks for one (A2A's agent cards, MCP's protected-resource
metadata): those name `public_base`, the URL the client called the API by.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass

from litestar.datastructures import Headers, MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from agency.services.api.setting_entry import SettingEntryError

ENV = "AGENCY_TRUSTED_PROXIES"
PREFIX_KEY = "agency.forwarded_prefix"
# A prefix is a plain path: segments of URL-safe characters, no dot segments.
_PREFIX = re.compile(r"(/[A-Za-z0-9_~\-][A-Za-z0-9_.~\-]*)+")
_HOST = re.compile(r"[A-Za-z0-9.\-]+(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?")
_SCHEMES = {"http": "http", "https": "https"}
_WS_SCHEMES = {"http": "ws", "https": "wss"}


class TrustedProxiesError(SettingEntryError):
    def __init__(self, entry: str) -> None:
        super().__init__(ENV, entry, "an IP address, a network (10.0.0.0/8) or `*`")


@dataclass(frozen=True, slots=True)
class TrustedProxies:
    """The peers whose `X-Forwarded-*` headers are believed: networks (in their normal
    form, so that the settings travel as plain data to each API process), or any (`*`)."""

    networks: tuple[str, ...] = ()
    any_peer: bool = False

    @classmethod
    def parse(cls, value: str) -> TrustedProxies:
        """A comma-separated list of addresses and networks, or `*`; empty for none."""
        networks: list[str] = []
        any_peer = False
        for entry in (e.strip() for e in value.split(",")):
            if not entry:
                continue
            if entry == "*":
                any_peer = True
                continue
            try:
                networks.append(str(ipaddress.ip_network(entry, strict=False)))
            except ValueError:
                raise TrustedProxiesError(entry) from None
        return cls(tuple(networks), any_peer)

    @classmethod
    def from_env(cls, default: str = "") -> TrustedProxies:
        return cls.parse(os.environ.get(ENV, default))

    @property
    def enabled(self) -> bool:
        return bool(self.networks) or self.any_peer

    def trusts(self, address: str) -> bool:
        if self.any_peer:
            return True
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in ipaddress.ip_network(network) for network in self.networks)


class ForwardedMiddleware(ASGIMiddleware):
    """Applies a trusted proxy's `X-Forwarded-*` to the request's scope."""

    scopes = (ScopeType.HTTP, ScopeType.WEBSOCKET)

    def __init__(self, proxies: TrustedProxies) -> None:
        self._proxies = proxies

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        client = scope.get("client")
        if client and self._proxies.trusts(client[0]):
            _apply(scope, self._proxies)
        await next_app(scope, receive, send)


def _first(value: str | None) -> str:
    """The first of a header's comma-separated values (the one the client's side added)."""
    return (value or "").split(",")[0].strip()


def _apply(scope: Scope, proxies: TrustedProxies) -> None:
    headers = MutableScopeHeaders(scope)
    if (chain := headers.get("x-forwarded-for")) is not None:
        # Right to left: the last address a proxy we do not trust added is the client's.
        hops = [hop.strip() for hop in chain.split(",") if hop.strip()]
        client = next((hop for hop in reversed(hops) if not proxies.trusts(hop)), None)
        if client is None and hops:
            client = hops[0]
        if client:
            scope["client"] = (client, 0)
    proto = _first(headers.get("x-forwarded-proto")).lower()
    schemes = _WS_SCHEMES if scope["type"] == ScopeType.WEBSOCKET else _SCHEMES
    if proto in schemes:
        scope["scheme"] = schemes[proto]
    host = _first(headers.get("x-forwarded-host"))
    if host and _HOST.fullmatch(host):
        headers["host"] = host
    prefix = _first(headers.get("x-forwarded-prefix")).rstrip("/")
    if prefix and _PREFIX.fullmatch(prefix):
        scope[PREFIX_KEY] = prefix  # type: ignore[literal-required]


def public_base(scope: Scope) -> str:
    """The URL the client called the API by, without a trailing `/`: the scheme, the `Host`
    and the prefix, as a trusted proxy forwarded them (else as the API saw them)."""
    host = Headers.from_scope(scope).get("host") or "localhost"
    return f"{scope.get('scheme', 'http')}://{host}{forwarded_prefix(scope)}"


def forwarded_prefix(scope: Scope) -> str:
    """The path a trusted proxy serves the API under (`""` when none said one)."""
    prefix = scope.get(PREFIX_KEY, "")
    return prefix if isinstance(prefix, str) else ""
