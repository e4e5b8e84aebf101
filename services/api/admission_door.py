"""Each tenant's share of the API process under overload (`services/tenancy/admission.py`).

After authentication, before the route reads its body or does anything: a tenant's request
that changes something (any method but GET and HEAD) holds places in the process's work
(one, and one more per 64 KB of body as its `Content-Length` says) until its answer
starts, and its latency to that moment is what the limit is measured
from; a read, a stream or a WebSocket holds a place among the open ones until it ends.
Beyond its share of a saturated process a tenant is answered 429 with `Retry-After` (the
same seconds as the message), sent from here: the route, its body and the key's revocation
watch (`RevocationMiddleware`, after this one) cost a refused request nothing. The admin's
requests and public routes are not counted.

A route whose answer waits for a run to end (LangGraph's `runs/wait`, MCP's tool calls)
marks itself with `ANSWER_WAITS_OPT`: it holds its place, but its latency is the run's, not
the process's, and is no sample.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from agency.services.api.deps import Principal
from agency.services.api.revocation import deny_websocket
from agency.services.tenancy.admission import Admission, Refused, Ticket

ANSWER_WAITS_OPT = "answer_waits"
_REFUSAL = msgspec.json.Encoder()
_READS = frozenset({"GET", "HEAD"})


class AdmissionMiddleware(ASGIMiddleware):
    """Admits a tenant's request within its share, or answers 429 before the route runs."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        principal = scope.get("user")
        if not self._admission.enabled or not isinstance(principal, Principal) or principal.admin:
            await next_app(scope, receive, send)
            return
        tenant = principal.tenant_id
        websocket = scope["type"] == ScopeType.WEBSOCKET
        opening = websocket or scope.get("method", "GET") in _READS
        now = time.monotonic()
        try:
            ticket = (
                self._admission.open(tenant, now)
                if opening
                else self._admission.enter(tenant, now, _body_bytes(scope))
            )
        except Refused as refused:
            if websocket:
                await deny_websocket(scope, send, 429, str(refused))
            else:
                await refuse(send, refused)
            return
        if opening:
            try:
                await next_app(scope, receive, send)
            finally:
                ticket.done(time.monotonic())
            return
        route_handler = scope.get("route_handler")
        ticket.sample = not (route_handler is not None and route_handler.opt.get(ANSWER_WAITS_OPT))
        try:
            await next_app(scope, receive, _answered(ticket, send))
        finally:
            ticket.done(time.monotonic(), sample=False)


async def refuse(send: Send, refused: Refused) -> None:
    """The 429 itself, as the app's error handler would write it (`{error, status}`), sent
    here: a refusal raised would cost the exception's way through every middleware and the
    handler's lookup, for each of a flood's refused requests. The body is not read."""
    body = _REFUSAL.encode({"error": str(refused), "status": 429})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"retry-after", b"%d" % refused.retry_after),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _body_bytes(scope: Scope) -> int:
    """The body's size as its `Content-Length` says (0 when it says nothing)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def _answered(ticket: Ticket, send: Send) -> Send:
    """`send` that gives the ticket back as the answer starts."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            ticket.done(time.monotonic())
        await send(message)

    return sending


def admission_opt() -> dict[str, Any]:
    """The opt of a route whose answer waits for a run to end."""
    return {ANSWER_WAITS_OPT: True}
