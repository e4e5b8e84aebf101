"""How both bindings answer: what the request names (the agent, the protocol version), and
streams of `StreamResponse` as Server-Sent Events, framed as each binding frames them."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import structlog
from litestar import Request
from litestar.datastructures import State
from litestar.response import Stream
from nats.errors import Error as NatsError

from agency.infra.jetstream.errors import StoreError
from agency.services.a2a.wire import StreamResponse
from agency.services.api.a2a.agent import Agent
from agency.services.api.a2a.errors import InvalidParams, VersionNotSupported
from agency.services.api.a2a.service import agent_for
from agency.services.api.auth import path_id, tenant_of
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.sse import EVENT_STREAM, sse_answer
from agency.services.api.streaming import closing_event

log = structlog.get_logger(__name__)

VERSION_HEADER = "a2a-version"
_VERSIONS = frozenset({"1.0", "1"})


def check_version(request: Request[Any, Any, State]) -> None:
    """A2A-Version names the protocol the client speaks: 1.0 here (absent: the client
    trusts the card)."""
    asked = request.headers.get(VERSION_HEADER) or request.query_params.get("A2A-Version")
    if asked and asked.strip() not in _VERSIONS:
        raise VersionNotSupported(
            f"A2A-Version {asked[:20]!r} is not supported: this server speaks 1.0"
        )


async def agent_named(
    deps: ApiDeps,
    principal: Principal,
    request: Request[Any, Any, State],
    agency_id: str,
    blueprint: str,
) -> Agent:
    """The agent of the path (or the interface's `tenant`): 404 unless the tenant has it."""
    tenant = tenant_of(principal)
    agency_id = path_id("agency id", agency_id)
    blueprint = path_id("blueprint", blueprint)
    return await agent_for(deps, tenant, agency_id, blueprint, closing_event(request.app.state))


def agent_of_tenant_param(value: object) -> tuple[str, str]:
    """`{agencyId}/{blueprint}` as the tenant-level card's interfaces name an agent."""
    if not isinstance(value, str) or value.count("/") != 1:
        raise InvalidParams(
            "params.tenant must name the agent as '{agencyId}/{blueprint}' (see the skills "
            "of /.well-known/agent-card.json)"
        )
    agency_id, blueprint = value.split("/")
    return agency_id, blueprint


class EventStream(Stream):
    """Server-Sent Events from a route that may also answer JSON: the route's own media
    type would win over the stream's."""

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["media_type"] = EVENT_STREAM
        return super().to_asgi_response(*args, **kwargs)


def sse(
    events: AsyncGenerator[StreamResponse, None], frame: Callable[[StreamResponse], bytes]
) -> Stream:
    """The events as Server-Sent Events, each `data: <frame>`; the stream (and its feed)
    closes when the client goes away."""
    return sse_answer(_frames(events, frame), events.aclose, response=EventStream)


async def _frames(
    events: AsyncGenerator[StreamResponse, None], frame: Callable[[StreamResponse], bytes]
) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            yield b"data: %s\n\n" % frame(event)
    except (NatsError, StoreError, TimeoutError) as e:
        # The response has started: end it; the client resubscribes to the task.
        log.warning("a2a stream ended by a NATS error", error=str(e))
    finally:
        await events.aclose()
