"""The API's calls as methods of both clients, each written once.

An `Endpoint` turns a request description of `calls` into a method of the client it is read
from: on the async client (an `AsyncSender`) the method answers an awaitable, on the sync one
(a `SyncSender`) the answer itself. `Endpoints` lists them; a client adds only how it sends
a `Call` and how it reads a stream.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, ParamSpec, Self, TypeVar, overload

import httpx
from httpx_sse import ServerSentEvent

from agency.contracts.http import EventView
from agency.services.client import calls
from agency.services.client.calls import Call, decode_event, ends_follow, followed

P = ParamSpec("P")
T = TypeVar("T")
H = TypeVar("H")
Transport = TypeVar("Transport")

# Keep-alives come every 15 s: a minute without a byte is a dead connection.
STREAM_READ_TIMEOUT = 60.0


class Endpoint(Generic[P, T]):
    """A method of both clients that sends the `Call` its `build` describes."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self._build = build
        self.__doc__ = build.__doc__
        # The method's parameters are the description's; what it answers is the client's.
        self._signature = inspect.signature(build).replace(return_annotation=Any)

    @overload
    def __get__(self, client: None, owner: type) -> Self: ...
    @overload
    def __get__(self, client: AsyncSender, owner: type) -> Callable[P, Awaitable[T]]: ...
    @overload
    def __get__(self, client: SyncSender, owner: type) -> Callable[P, T]: ...
    def __get__(self, client: Endpoints[Any, Any] | None, owner: type) -> Any:
        if client is None:
            return self
        send, build = client.send, self._build

        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return send(build(*args, **kwargs))

        method.__name__ = method.__qualname__ = build.__name__
        method.__doc__ = self.__doc__
        method.__signature__ = self._signature  # type: ignore[attr-defined]
        return method


class Endpoints(ABC, Generic[H, Transport]):
    """The calls both clients make, on an `httpx` client of the type `_connect` makes."""

    _connect: Callable[..., H]

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        transport: Transport | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """`headers` are sent with every request besides the key (`X-Secret`, `User-Agent`)."""
        self._http: H = self._connect(
            base_url=base_url,
            headers={**(headers or {}), "Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )

    export_thread = Endpoint(calls.export_thread)
    export_agency = Endpoint(calls.export_agency)
    export_tenant = Endpoint(calls.export_tenant)
    import_archive = Endpoint(calls.import_archive)
    list_agencies = Endpoint(calls.list_agencies)
    create_agency = Endpoint(calls.create_agency)
    list_blueprints = Endpoint(calls.list_blueprints)
    list_threads = Endpoint(calls.list_threads)
    create_thread = Endpoint(calls.create_thread)
    invoke = Endpoint(calls.invoke)
    approve = Endpoint(calls.approve)
    cancel = Endpoint(calls.cancel)
    terminate = Endpoint(calls.terminate)
    delete_thread = Endpoint(calls.delete_thread)
    delete_agency = Endpoint(calls.delete_agency)
    forget_end_user = Endpoint(calls.forget_end_user)
    state = Endpoint(calls.state)
    events = Endpoint(calls.events)

    @abstractmethod
    def send(self, call: Call[T]) -> Any:
        """Send `call`: its decoded answer, or an awaitable of it."""


class AsyncSender(Endpoints[httpx.AsyncClient, httpx.AsyncBaseTransport]):
    """A client whose `send` answers an awaitable."""

    _connect = httpx.AsyncClient

    @abstractmethod
    def send(self, call: Call[T]) -> Awaitable[T]: ...


class SyncSender(Endpoints[httpx.Client, httpx.BaseTransport]):
    """A client whose `send` answers at once."""

    _connect = httpx.Client

    @abstractmethod
    def send(self, call: Call[T]) -> T: ...


def stream_call(agency_id: str, thread_id: str, from_seq: int) -> Call[dict[str, Any]]:
    """The request of a thread's event stream; `decode` of its answer raises its error."""
    path = calls.thread_path(agency_id, thread_id) + "/stream"
    return Call("GET", path, dict[str, Any], params={"fromSeq": from_seq})


def stream_timeout(timeout: httpx.Timeout) -> httpx.Timeout:
    return httpx.Timeout(timeout.connect, read=STREAM_READ_TIMEOUT)


def event_of(message: ServerSentEvent) -> EventView | None:
    """The event of a frame: one unnamed frame an event; a keep-alive after an `id:` comes
    through as one with no data (httpx-sse keeps the last id, as the SSE spec says)."""
    if message.event == "message" and message.data:
        return decode_event(message.data)
    return None


class Follow:
    """What a follow of one run shows, and where it ends."""

    def __init__(self, run_id: str) -> None:
        self.runs = {run_id}
        self.ended = False

    def shows(self, event: EventView) -> bool:
        if not followed(event, self.runs):
            return False
        self.ended = ends_follow(event, self.runs)
        return True
