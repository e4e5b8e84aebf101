"""LangGraph's thread protocol over a WebSocket (`threads.stream(…, {transport:
"websocket"})`): `/threads/{id}/stream/events`, commands and events on one socket.

The client sends commands (`{"id", "method", "params"}`) as text messages; each is answered
`{"type": "success", "id", "result"}` or `{"type": "error", "id", "error", "message"}`.
`subscription.subscribe` (`channels`, `namespaces`?) starts sending the thread's protocol
events of those channels, folded from its start (the SDK drops an `event_id` it has
seen: a resubscription after a reconnect replays nothing twice), then as they happen;
`subscription.unsubscribe` stops one. Every other command is the one `POST …/commands`
serves (`routes_protocol.run_command`). A socket may be opened on a thread the tenant does
not have yet: `run.start` creates it, as over HTTP; a subscription to a thread the tenant
does not have is `no_such_run`. The socket is refused like any request (4xx before the
handshake, or close code 4000 + status); the server's own shutdown closes it with 1001.
A browser's WebSocket cannot send headers: there the key comes as `?access_token=`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec
import structlog
from litestar import WebSocket, websocket
from litestar.datastructures import State
from litestar.exceptions import HTTPException, NotFoundException, WebSocketDisconnect
from nats.errors import Error as NatsError

from agency.contracts.ids import new_id
from agency.infra.jetstream.errors import StoreError
from agency.services.api.auth import QUERY_TOKEN_OPT, Caller, Deps, tenant_of
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.langgraph.protocol_events import ProtocolEvents, channel_of
from agency.services.api.langgraph.routes_protocol import (
    EventStreamRequest,
    ProtocolCommand,
    run_command,
    wanted_channels,
)
from agency.services.api.langgraph.scope import ThreadIdPath, load_thread, thread_id_of
from agency.services.api.revocation import deny_websocket
from agency.services.api.streaming import ThreadFeed, closing_event

log = structlog.get_logger(__name__)

MAX_SUBSCRIPTIONS = 32
_ERROR_CODES = {400: "invalid_argument", 401: "permission_denied", 403: "permission_denied"}
_command = msgspec.json.Decoder(ProtocolCommand)
_encode = msgspec.json.Encoder().encode


class ProtocolSocket:
    """One client's socket: its subscriptions, each a task following the thread."""

    def __init__(
        self, socket: WebSocket[Any, Any, State], deps: ApiDeps, tenant: str, thread_id: str
    ) -> None:
        self._socket = socket
        self._deps = deps
        self._tenant = tenant
        self._thread_id = thread_id
        self._sending = asyncio.Lock()
        self._subscriptions: dict[str, asyncio.Task[None]] = {}

    async def send(self, message: dict[str, Any]) -> None:
        async with self._sending:
            await self._socket.send_text(_encode(message).decode())

    async def serve(self) -> None:
        """Answer commands until the client leaves (or the server closes)."""
        while True:
            raw = await self._socket.receive_text()
            try:
                command = _command.decode(raw)
            except msgspec.DecodeError as e:
                await self.send(_error(None, "invalid_argument", f"not a command: {e}"))
                continue
            await self.send(await self._answer(command))

    async def _answer(self, command: ProtocolCommand) -> dict[str, Any]:
        try:
            match command.method:
                case "subscription.subscribe":
                    result = await self._subscribe(command.params)
                case "subscription.unsubscribe":
                    result = self._unsubscribe(command.params)
                case _:
                    return await run_command(
                        self._deps, self._tenant, self._thread_id, command, self._socket
                    )
        except HTTPException as e:
            unknown = e.status_code == 400 and "does not map" in e.detail
            code = "unknown_command" if unknown else _ERROR_CODES.get(e.status_code)
            if e.status_code == 404:
                code = "no_such_run"
            return _error(command.id, code or "invalid_argument", e.detail)
        return {"type": "success", "id": command.id, "result": result}

    async def _subscribe(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            asked = msgspec.convert(params, EventStreamRequest)
        except msgspec.ValidationError as e:
            raise HTTPException(status_code=400, detail=f"subscription.subscribe: {e}") from e
        channels, root = wanted_channels(asked)
        await load_thread(self._deps, self._tenant, self._thread_id)  # 404 if not the tenant's
        if len(self._subscriptions) >= MAX_SUBSCRIPTIONS:
            raise HTTPException(
                status_code=400, detail=f"a socket holds {MAX_SUBSCRIPTIONS} subscriptions"
            )
        subscription_id = new_id()
        follow = self._follow(channels if root else set())
        self._subscriptions[subscription_id] = asyncio.create_task(
            follow, name=f"protocol-ws-{subscription_id}"
        )
        return {"subscription_id": subscription_id}

    def _unsubscribe(self, params: dict[str, Any]) -> dict[str, Any]:
        task = self._subscriptions.pop(str(params.get("subscription_id")), None)
        if task is None:
            raise NotFoundException(f"no subscription {str(params.get('subscription_id'))[:80]}")
        task.cancel()
        return {}

    async def _follow(self, channels: set[str]) -> None:
        """The thread's protocol events of `channels`, folded from its start, as they come."""
        view = GraphView(tenant_id=self._tenant, thread_id=self._thread_id)
        events = ProtocolEvents(view)
        closing = closing_event(self._socket.app.state)
        feed = ThreadFeed(self._deps, self._tenant, self._thread_id, 0, closing)
        try:
            for event in await feed.backfill():
                view.apply(event)
                await self._send_events(events.after(event), channels)
            async for batch in feed.live():
                for event in batch:
                    view.apply(event)
                    await self._send_events(events.after(event), channels)
        except (NatsError, StoreError, TimeoutError) as e:
            log.warning("langgraph protocol socket ended by a NATS error", error=str(e))
            with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
                await self._socket.close(code=1011)
        except (WebSocketDisconnect, OSError, RuntimeError):
            return  # the client left
        finally:
            await feed.aclose()

    async def _send_events(self, batch: list[dict[str, Any]], channels: set[str]) -> None:
        for event in batch:
            if channel_of(event["method"]) in channels:
                await self.send(event)

    async def aclose(self) -> None:
        tasks = list(self._subscriptions.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _error(command_id: int | None, code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "id": command_id, "error": code, "message": message}


# A browser's WebSocket sends no header: the key may come as `?access_token=` (the SDK's
# `webSocketFactory` adds it); `x-api-key` works from any other client.
@websocket("/threads/{thread_id:str}/stream/events", opt={QUERY_TOKEN_OPT: True})
async def thread_events_socket(
    socket: WebSocket[Any, Any, State], thread_id: ThreadIdPath, principal: Caller, deps: Deps
) -> None:
    try:
        tenant = tenant_of(principal)
        thread_id = thread_id_of(thread_id)
    except HTTPException as e:
        await deny_websocket(socket.scope, socket.send, e.status_code, e.detail)
        return
    await socket.accept()
    client = ProtocolSocket(socket, deps, tenant, thread_id)
    serving = asyncio.create_task(client.serve(), name="protocol-ws")
    closing = asyncio.create_task(closing_event(socket.app.state).wait(), name="protocol-ws-stop")
    try:
        done, _ = await asyncio.wait({serving, closing}, return_when=asyncio.FIRST_COMPLETED)
        if closing in done:
            with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
                await socket.close(code=1001)  # going away: the SDK reconnects elsewhere
        elif (failed := serving.exception()) is not None and not isinstance(
            failed, WebSocketDisconnect
        ):
            log.error("langgraph protocol socket failed", error=str(failed))
    finally:
        for task in (serving, closing):
            task.cancel()
        await asyncio.gather(serving, closing, return_exceptions=True)
        await client.aclose()


PROTOCOL_SOCKET_ROUTES = [thread_events_socket]
