"""Cross-origin requests from the browser apps an operator allows (`AGENCY_CORS_ORIGINS`).

A preflight from an allowed origin is answered here, before authentication (a browser
sends no credentials on one); one from another origin is refused with a 403 that says so.
Every other answer to an allowed origin carries `Access-Control-Allow-Origin` and exposes
the headers clients read (`Location`, `Content-Location`, …); answers to other origins
carry no CORS header, so a browser hands them to no page. Keys travel in headers
(`Authorization`, `x-api-key`), never in cookies: no `Allow-Credentials`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import msgspec
from litestar.datastructures import MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import (
    ASGIApp,
    BeforeMessageSendHookHandler,
    Message,
    Receive,
    Scope,
    Send,
)

from agency.services.api.setting_entry import SettingEntryError

ENV = "AGENCY_CORS_ORIGINS"
# `local`: a page served from this machine, on any port (a dev server, the console).
_LOCAL = re.compile(r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?")
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+")
METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
EXPOSED = "Location, Content-Location, X-Request-Id, Retry-After, Content-Type"
MAX_AGE = "600"
_encoder = msgspec.json.Encoder()


class CorsSettingError(SettingEntryError):
    def __init__(self, entry: str) -> None:
        super().__init__(ENV, entry, "an origin (scheme://host[:port]), `local` or `*`")


@dataclass(frozen=True, slots=True)
class CorsSettings:
    """The origins allowed: exact ones, any on this machine (`local`), or any (`*`)."""

    origins: frozenset[str] = frozenset()
    local: bool = False
    any_origin: bool = False

    @classmethod
    def parse(cls, value: str) -> CorsSettings:
        """A comma-separated list: origins, `local`, `*`; empty for none."""
        origins: set[str] = set()
        local = any_origin = False
        for entry in (e.strip() for e in value.split(",")):
            if not entry:
                continue
            if entry == "*":
                any_origin = True
            elif entry == "local":
                local = True
            elif _ORIGIN.fullmatch(entry.rstrip("/")):
                origins.add(entry.rstrip("/").lower())
            else:
                raise CorsSettingError(entry)
        return cls(frozenset(origins), local, any_origin)

    @classmethod
    def from_env(cls, default: str = "") -> CorsSettings:
        return cls.parse(os.environ.get(ENV, default))

    @property
    def enabled(self) -> bool:
        return bool(self.origins) or self.local or self.any_origin

    def allows(self, origin: str) -> bool:
        return (
            self.any_origin
            or origin.lower() in self.origins
            or (self.local and _LOCAL.fullmatch(origin) is not None)
        )


class CorsMiddleware(ASGIMiddleware):
    """Answers preflights, before authentication: with no origin allowed, a clear 403."""

    scopes = (ScopeType.HTTP,)

    def __init__(self, settings: CorsSettings) -> None:
        self._settings = settings

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if scope.get("method") != "OPTIONS":
            await next_app(scope, receive, send)
            return
        headers = MutableScopeHeaders(scope)
        origin = headers.get("origin")
        if origin is not None and "access-control-request-method" in headers:
            allowed = self._settings.allows(origin)
            await _preflight(send, origin, allowed, headers.get("access-control-request-headers"))
            return
        await next_app(scope, receive, send)


def cors_headers(settings: CorsSettings) -> BeforeMessageSendHookHandler:
    """The app's `before_send` hook: every answer to an allowed origin (errors raised
    anywhere included) says so."""

    async def add(message: Message, scope: Scope) -> None:
        if message["type"] != "http.response.start" or scope["type"] != ScopeType.HTTP:
            return
        origin = MutableScopeHeaders(scope).get("origin")
        if origin is None or not settings.allows(origin):
            return
        out = MutableScopeHeaders.from_message(message)
        if "access-control-allow-origin" not in out:
            out["Access-Control-Allow-Origin"] = origin
            out["Access-Control-Expose-Headers"] = EXPOSED
            out.add("Vary", "Origin")

    return add


async def _preflight(send: Send, origin: str, allowed: bool, asked_headers: str | None) -> None:
    headers = {"Vary": "Origin"}
    body = b""
    if allowed:
        headers |= {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": METHODS,
            "Access-Control-Max-Age": MAX_AGE,
        }
        if asked_headers:
            headers["Access-Control-Allow-Headers"] = asked_headers
    else:
        error = {"error": f"origin {origin[:120]!r} is not allowed ({ENV})", "status": 403}
        body = _encoder.encode(error)
        headers["Content-Type"] = "application/json"
    raw = [(k.lower().encode(), v.encode("latin-1", "replace")) for k, v in headers.items()]
    raw.append((b"content-length", str(len(body)).encode()))
    status = 204 if allowed else 403
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})
