"""The sync client of the HTTP API, the async one's twin for scripts and notebooks: typed
answers, errors as `ApiError`, runs followed live over Server-Sent Events."""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from contextlib import closing
from typing import Self, TypeVar, Unpack

import httpx
from httpx_sse import connect_sse

from agency.contracts import http
from agency.projections import agency_queries, queries, state_queries
from agency.services.client import calls
from agency.services.client.calls import (
    Call,
    decode_event,
    ends_follow,
    followed,
    thread_path,
)

T = TypeVar("T")
STREAM_READ_TIMEOUT = 60.0


class AgencyClient:
    """`with AgencyClient(url, api_key) as client: ...`"""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """`headers` are sent with every request besides the key (`X-Secret`, `User-Agent`)."""
        self._http = httpx.Client(
            base_url=base_url,
            headers={**(headers or {}), "Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[T]) -> T:
        response = self._http.request(
            call.method,
            call.path,
            params=call.params,
            json=call.json,
            headers=call.headers,
            content=call.content,
        )
        return call.decode(response.status_code, response.content)

    def export_thread(self, agency_id: str, thread_id: str) -> bytes:
        """An archive (`.tar.gz`) of a root thread, its subagents and its agency's events."""
        return self._send(calls.export_thread(agency_id, thread_id))

    def export_agency(self, agency_id: str) -> bytes:
        """An archive of the agency and every thread in it."""
        return self._send(calls.export_agency(agency_id))

    def export_tenant(self, end_user_id: str | None = None) -> bytes:
        """An archive of the caller's whole tenant, or of one end user's threads."""
        return self._send(calls.export_tenant(end_user_id))

    def import_archive(self, archive: bytes) -> http.ArchiveImported:
        """Write a thread's, an agency's or an end user's archive into the caller's tenant."""
        return self._send(calls.import_archive(archive))

    def list_agencies(self) -> list[agency_queries.AgencyView]:
        return self._send(calls.list_agencies())

    def create_agency(
        self, name: str, metadata: dict[str, str] | None = None
    ) -> agency_queries.AgencyView:
        return self._send(calls.create_agency(name, metadata))

    def list_blueprints(self, agency_id: str) -> list[calls.BlueprintInfo]:
        return self._send(calls.list_blueprints(agency_id))

    def list_threads(self, agency_id: str) -> list[queries.ThreadView]:
        return self._send(calls.list_threads(agency_id))

    def create_thread(
        self, agency_id: str, agent_type: str, metadata: dict[str, str] | None = None
    ) -> http.ThreadOut:
        return self._send(calls.create_thread(agency_id, agent_type, metadata))

    def find_thread(self, thread_id: str) -> queries.ThreadView | None:
        """The thread with this id in any of the caller's agencies."""
        for agency in self.list_agencies():
            for thread in self.list_threads(agency.id):
                if thread.id == thread_id:
                    return thread
        return None

    def invoke(
        self,
        agency_id: str,
        thread_id: str,
        text: str | None = None,
        **options: Unpack[calls.InvokeOptions],
    ) -> http.RunAccepted:
        return self._send(calls.invoke(agency_id, thread_id, text, **options))

    def approve(
        self,
        agency_id: str,
        thread_id: str,
        approved: bool = True,
        **options: Unpack[calls.ApproveOptions],
    ) -> http.RunCommandAccepted:
        return self._send(calls.approve(agency_id, thread_id, approved, **options))

    def cancel(
        self, agency_id: str, thread_id: str, reason: str = "", run_id: str | None = None
    ) -> http.CancelAccepted:
        return self._send(calls.cancel(agency_id, thread_id, reason, run_id))

    def terminate(self, agency_id: str, thread_id: str, reason: str = "") -> http.TerminateAccepted:
        """Shut the thread down for good: its run ends canceled, later invokes are refused."""
        return self._send(calls.terminate(agency_id, thread_id, reason))

    def delete_thread(self, thread_id: str) -> http.ThreadDeletion:
        """Erase the thread and its subagent tree for good (docs/data.md); reads of it
        answer 410 afterwards. A repeat answers the first deletion."""
        return self._send(calls.delete_thread(thread_id))

    def delete_agency(self, agency_id: str) -> http.AgencyDeletion:
        """Erase every thread of the agency, then the agency (docs/data.md): its threads
        answer 410 afterwards, its routes 404. A repeat answers the first deletion."""
        return self._send(calls.delete_agency(agency_id))

    def forget_end_user(self, end_user_id: str) -> http.EndUserForgetting:
        """Erase every thread created for the end user, across the tenant's agencies
        (docs/data.md); the request is recorded, and a repeat erases what is left."""
        return self._send(calls.forget_end_user(end_user_id))

    def state(self, agency_id: str, thread_id: str) -> state_queries.ThreadStateView:
        return self._send(calls.state(agency_id, thread_id))

    def events(
        self,
        agency_id: str,
        thread_id: str,
        from_seq: int = 0,
        limit: int = 100,
        types: list[str] | None = None,
    ) -> http.EventsPage:
        return self._send(calls.events(agency_id, thread_id, from_seq, limit, types))

    def stream(
        self, agency_id: str, thread_id: str, from_seq: int = 0
    ) -> Generator[http.EventView, None, None]:
        """The thread's events from `from_seq` (0: the start), stored then live, until the
        caller stops iterating or the server ends the stream."""
        path = thread_path(agency_id, thread_id) + "/stream"
        # Keep-alives come every 15 s: a minute without a byte is a dead connection.
        timeout = httpx.Timeout(self._http.timeout.connect, read=STREAM_READ_TIMEOUT)
        with connect_sse(
            self._http, "GET", path, params={"fromSeq": from_seq}, timeout=timeout
        ) as source:
            if source.response.status_code >= 400:
                source.response.read()
                Call("GET", path, dict).decode(source.response.status_code, source.response.content)
            for message in source.iter_sse():
                # One unnamed frame an event; a keep-alive after an `id:` comes through as
                # one with no data (httpx-sse keeps the last id, as the SSE spec says).
                if message.event == "message" and message.data:
                    yield decode_event(message.data)

    def follow(
        self, agency_id: str, thread_id: str, run_id: str, from_seq: int = 0
    ) -> Generator[http.EventView, None, None]:
        """The run's events, live, ending with the one that ends it or pauses it for a person
        (it goes on through a pause for subagents, which resumes by itself). A request that
        joins another run is followed in that run."""
        runs = {run_id}
        with closing(self.stream(agency_id, thread_id, from_seq)) as events:
            for event in events:
                if not followed(event, runs):
                    continue
                yield event
                if ends_follow(event, runs):
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
                status = calls.RUN_STATUS_OF.get(event.type, status)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"run {run_id} did not end within {timeout} s")
        return status
