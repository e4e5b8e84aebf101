"""The sync client of the HTTP API, for scripts and notebooks: the async client's calls
(`endpoints.Endpoints`), each answered at once, and runs followed live over Server-Sent
Events."""

from __future__ import annotations

import time
from collections.abc import Generator
from contextlib import closing
from typing import Self, TypeVar

from httpx_sse import connect_sse

from agency.contracts import http
from agency.projections import queries
from agency.services.client.calls import RUN_STATUS_OF, Call
from agency.services.client.endpoints import (
    Follow,
    SyncSender,
    event_of,
    stream_call,
    stream_timeout,
)

T = TypeVar("T")


class AgencyClient(SyncSender):
    """`with AgencyClient(url, api_key) as client: ...`"""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send one request as `call` describes it; its answer decoded, or `ApiError`."""
        response = self._http.request(
            call.method, call.path,
            params=call.params, json=call.json, headers=call.headers, content=call.content,
        )  # fmt: skip
        return call.decode(response.status_code, response.content)

    def find_thread(self, thread_id: str) -> queries.ThreadView | None:
        """The thread with this id in any of the caller's agencies."""
        lists = (self.list_threads(agency.id) for agency in self.list_agencies())
        return next((t for threads in lists for t in threads if t.id == thread_id), None)

    def stream(
        self, agency_id: str, thread_id: str, from_seq: int = 0
    ) -> Generator[http.EventView, None, None]:
        """The thread's events from `from_seq` (0: the start), stored then live, until the
        caller stops iterating or the server ends the stream."""
        call = stream_call(agency_id, thread_id, from_seq)
        with connect_sse(
            self._http, call.method, call.path,
            params=call.params, timeout=stream_timeout(self._http.timeout),
        ) as source:  # fmt: skip
            if source.response.status_code >= 400:
                call.decode(source.response.status_code, source.response.read())
            events = (event_of(message) for message in source.iter_sse())
            yield from (event for event in events if event is not None)

    def follow(
        self, agency_id: str, thread_id: str, run_id: str, from_seq: int = 0
    ) -> Generator[http.EventView, None, None]:
        """The run's events, live, ending with the one that ends it or pauses it for a person
        (it goes on through a pause for subagents, which resumes by itself). A request that
        joins another run is followed in that run."""
        run = Follow(run_id)
        with closing(self.stream(agency_id, thread_id, from_seq)) as events:
            for event in events:
                if run.shows(event):
                    yield event
                if run.ended:
                    return

    def wait(
        self, agency_id: str, thread_id: str, run_id: str, timeout: float, from_seq: int = 0
    ) -> str:
        """The run's status once it ends or pauses (`completed`, `paused`, `error`, …), from
        the thread's events from `from_seq` (after an approval: past the pause).
        The stream's keep-alives (every 15 s) bound how late a timeout is noticed."""
        status = "pending"
        deadline = time.monotonic() + timeout
        with closing(self.follow(agency_id, thread_id, run_id, from_seq)) as events:
            for event in events:
                status = RUN_STATUS_OF.get(event.type, status)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"run {run_id} did not end within {timeout} s")
        return status
