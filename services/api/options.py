"""`OPTIONS` answers the methods a path really has.

litestar builds a path's automatic `OPTIONS` handler with the methods of the first handler
registered for it; a path whose methods come from several modules (`GET /agencies` from the
queries, `POST /agencies` from the commands) would answer too few. This middleware sets
`Allow` from the app's route map instead.
"""

from __future__ import annotations

from litestar.datastructures import MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send


class AllowMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        handler = scope.get("route_handler")
        if scope.get("method") != "OPTIONS" or handler is None:
            await next_app(scope, receive, send)
            return
        methods: set[str] = {"OPTIONS"}
        for path in handler.paths:
            methods.update(scope["litestar_app"].route_handler_method_map.get(path, {}))
        allow = ", ".join(sorted(m for m in methods if m.isupper()))

        async def send_with_allow(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableScopeHeaders.from_message(message)["Allow"] = allow
            await send(message)

        await next_app(scope, receive, send_with_allow)
