"""The async client of the HTTP API: typed answers, errors as `ApiError`, runs followed live
over Server-Sent Events. Its calls are `endpoints.Endpoints`, shared with the sync client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Self, TypeVar

from httpx_sse import aconnect_sse

from agency.contracts import http
from agency.projections import queries
from agency.services.client.calls import RUN_STATUS_OF, Call
from agency.services.client.endpoints import (
    AsyncSender,
    Follow,
    event_of,
    stream_call,
    stream_timeout,
)

T = TypeVar("T")


class AsyncAgencyClient(AsyncSender):
    """`async with AsyncAgencyClient(url, api_key) as client: ...`"""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send one request as `call` describes it; its answer decoded, or `ApiError`."""
        response = await self._http.request(
            call.method, call.path,
            params=call.params, json=call.json, headers=call.headers, content=call.content,
        )  # fmt: skip
        return call.decode(response.status_code, response.content)

    async def find_thread(self, thread_id: str) -> queries.ThreadView | None:
        """The thread with this id in any of the caller's agencies."""
        for agency in await self.list_agencies():
            threads = await self.list_threads(agency.id)
            if found := next((t for t in threads if t.id == thread_id), None):
                return found
        return None

    async def stream(
        self, agency_id: str, thread_id: str, from_seq: int = 0
    ) -> AsyncGenerator[http.EventView, None]:
        """The thread's events from `from_seq` (0: the start), stored then live, until the
        caller stops iterating or the server ends the stream."""
        call = stream_call(agency_id, thread_id, from_seq)
        timeout = stream_timeout(self._http.timeout)
        async with aconnect_sse(
            self._http, call.method, call.path, params=call.params, timeout=timeout
        ) as source:
            if source.response.status_code >= 400:
                call.decode(source.response.status_code, await source.response.aread())
            async for message in source.aiter_sse():
                if (event := event_of(message)) is not None:
                    yield event

    async def follow(
        self, agency_id: str, thread_id: str, run_id: str, from_seq: int = 0
    ) -> AsyncGenerator[http.EventView, None]:
        """The run's events, live, ending with the one that ends it or pauses it for a person
        (it goes on through a pause for subagents, which resumes by itself). A request that
        joins another run is followed in that run."""
        run = Follow(run_id)
        async with aclosing(self.stream(agency_id, thread_id, from_seq)) as events:
            async for event in events:
                if run.shows(event):
                    yield event
                if run.ended:
                    return

    async def wait(
        self, agency_id: str, thread_id: str, run_id: str, timeout: float, from_seq: int = 0
    ) -> str:
        """The run's status once it ends or pauses (`completed`, `paused`, `error`, …), from
        the thread's events from `from_seq` (after an approval: past the pause)."""
        status = "pending"
        async with (
            asyncio.timeout(timeout),
            aclosing(self.follow(agency_id, thread_id, run_id, from_seq)) as events,
        ):
            async for event in events:
                status = RUN_STATUS_OF.get(event.type, status)
        return status
