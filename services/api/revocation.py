"""A request made with an API key ends when the key is revoked, streams above all.

`RevocationMiddleware` (after authentication and admission, so a request refused there costs
no watch) serves every request made with a key through `serve_until_revoked`, with a
future `KeyCache.watch` completes when the key is revoked (deleted or rotated), by this
process or any other: every API process hears the key's `tenant.api_key_revoked` event on
NATS the moment it is appended. From then on the request is cut as soon as it is a stream:

- a WebSocket is closed with code 4401 and the reason (refused with 401 if not accepted yet);
- a response of Server-Sent Events (the thread streams, the LangGraph streams, MCP's, the
  AI SDK's chat) gets one `error` frame saying the key was revoked, and ends;
- a read (GET, HEAD) that has not answered yet, such as a long wait, answers 401.

The handler is cancelled first, and whatever it sends after the cut is dropped, so the
client receives nothing more. A write that has not answered yet is left to finish, so no
command is half-sent; if its answer is a stream, the stream is cut the moment it starts.
A refused handshake under way is let finish too. A reconnect with the key gets 401 like
any request. The cut follows the revocation's append within `CUT_SECONDS` (in practice
the time NATS takes to deliver the event).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec
import structlog
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from agency.services.api.deps import Principal
from agency.services.api.keys import KeyCache

log = structlog.get_logger(__name__)

# The bound docs/security.md promises between a key's revocation and its streams' end.
CUT_SECONDS = 2.0
# How long a cancelled handler is given to clean up (close its readers) before the answer
# ends without it; it goes on cleaning up after.
_CANCEL_GRACE = 1.0
REVOKED = "the API key was revoked: its open streams are closed; use a live key"
WS_REVOKED = 4401  # 4000 + 401, as a refused handshake is closed where HTTP cannot answer
_READS = frozenset({"GET", "HEAD"})
_REVOKED_FRAME = b"event: error\ndata: %s\n\n" % msgspec.json.encode(
    {"error": "api_key_revoked", "message": REVOKED, "status": 401}
)


async def deny_websocket(scope: Scope, send: Send, status: int, message: str) -> None:
    """Refuse a WebSocket handshake with an HTTP status where the server can say one
    (the ASGI `websocket.http.response` extension), else close with 4000 + status."""
    body = msgspec.json.encode({"error": message, "status": status})
    if "websocket.http.response" in (scope.get("extensions") or {}):
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body, "more_body": False})
        return
    await send({"type": "websocket.close", "code": 4000 + status, "reason": message[:120]})


class _Exchange:
    """What the handler has sent of its answer; after `cut`, nothing more goes out."""

    def __init__(self, scope: Scope, send: Send) -> None:
        self._send = send
        self._scope = scope
        self.websocket = scope["type"] == ScopeType.WEBSOCKET
        self.read = scope.get("method") in _READS
        self.started = False  # an answer begun: a response, an accept or a refusal
        self.accepted = False  # a WebSocket accepted
        self.ended = False
        self.sse = False
        self.cut = False
        self.on_start: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def cuttable(self) -> bool:
        """A stream, or a read with no answer begun; a plain answer under way is let finish."""
        if self.websocket:
            return self.accepted or not self.started  # a refusal under way is let finish
        return self.sse if self.started else self.read

    async def send(self, message: Message) -> None:
        if self.cut or self.ended:
            return
        kind = message["type"]
        if kind in ("http.response.start", "websocket.accept"):
            self.started = True
            self.accepted = kind == "websocket.accept"
            self.sse = kind == "http.response.start" and _is_sse(message)
            if not self.on_start.done():
                self.on_start.set_result(None)
        elif kind == "websocket.http.response.start":
            self.started = True  # a refused handshake: an HTTP answer, cut like one
        elif kind in ("http.response.body", "websocket.http.response.body"):
            self.ended = not message.get("more_body", False)
        elif kind == "websocket.close":
            self.ended = True
        await self._send(message)

    async def end(self) -> None:
        """Close what the handler left open: the client learns the key was revoked."""
        self.cut = True
        if self.ended:
            return
        self.ended = True
        with contextlib.suppress(OSError, RuntimeError):  # the client may be gone already
            if self.websocket and self.accepted:
                await self._send({"type": "websocket.close", "code": WS_REVOKED, "reason": REVOKED})
            elif self.websocket:
                await deny_websocket(self._scope, self._send, 401, REVOKED)
            elif self.started:
                body = _REVOKED_FRAME if self.sse else b""
                await self._send({"type": "http.response.body", "body": body, "more_body": False})
            else:
                await _unauthorized(self._send)


class RevocationMiddleware(ASGIMiddleware):
    """Serves a request made with an API key until the key is revoked (see the module)."""

    def __init__(self, keys: KeyCache) -> None:
        self._keys = keys

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        principal = scope.get("user")
        if not isinstance(principal, Principal) or principal.key_id is None:
            await next_app(scope, receive, send)
            return
        with self._keys.watch(principal.tenant_id, principal.key_id) as revoked:
            await serve_until_revoked(revoked, scope, receive, send, next_app)


async def serve_until_revoked(
    revoked: asyncio.Future[None], scope: Scope, receive: Receive, send: Send, app: ASGIApp
) -> None:
    """Serve the request with `app`; cut it (see the module) once `revoked` is done."""
    exchange = _Exchange(scope, send)
    handler = asyncio.ensure_future(app(scope, receive, exchange.send))
    try:
        await asyncio.wait({handler, revoked}, return_when=asyncio.FIRST_COMPLETED)
        while not handler.done() and not exchange.cuttable:
            # Revoked, but a write's answer has not begun or a plain answer is under way.
            waits = {handler} if exchange.started else {handler, exchange.on_start}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if handler.done():
            handler.result()  # its answer, or its error for the app's handlers
            return
        exchange.cut = True
        handler.cancel()
        await asyncio.wait({handler}, timeout=_CANCEL_GRACE)
        await exchange.end()
        log.info("request of a revoked API key cut", path=scope.get("path", ""))
    finally:
        if not handler.done():
            handler.cancel()
        # The handler's own cleanup is shielded and bounded; its cancellation is ours.
        await asyncio.gather(handler, return_exceptions=True)


def _is_sse(message: Message) -> bool:
    headers: Any = message.get("headers") or ()
    for name, value in headers:
        if name.lower() == b"content-type":
            return bytes(value).lower().startswith(b"text/event-stream")
    return False


async def _unauthorized(send: Send) -> None:
    body = msgspec.json.encode({"error": REVOKED, "status": 401})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"www-authenticate", b"Bearer"),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
