"""What each API call sends and what its answer decodes to, shared by the async and the
sync client. The answer types are the server's own structs, so the two cannot drift."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypedDict, TypeVar, Unpack

import msgspec

from agency.contracts.events.thread import ConcurrencyStrategy
from agency.contracts.http import (
    AgencyDeletion,
    ArchiveImported,
    CancelAccepted,
    EndUserForgetting,
    EventsPage,
    EventView,
    RunAccepted,
    RunCommandAccepted,
    RunStatus,
    TerminateAccepted,
    ThreadDeletion,
    ThreadOut,
)
from agency.projections import agency_queries, queries, state_queries

T = TypeVar("T")
Strategy = ConcurrencyStrategy


class ApiError(Exception):
    """The API answered an error: its status and its message."""

    def __init__(self, status: int, message: str, method: str, path: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"{method} {path} answered {status}: {message}")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    answer: type[T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    # A body sent as it is (an archive), instead of `json`.
    content: bytes | None = None

    def decode(self, status: int, content: bytes) -> T:
        if status >= 400:
            raise ApiError(status, _message(content), self.method, self.path)
        if self.answer is bytes:
            return content  # type: ignore[return-value]
        return msgspec.json.decode(content, type=self.answer)


def _message(content: bytes) -> str:
    try:
        body = msgspec.json.decode(content)
    except msgspec.DecodeError:
        return content.decode(errors="replace")[:500]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str):
        return error
    return str(body)[:500]


def thread_path(agency_id: str, thread_id: str) -> str:
    return f"/agency/{agency_id}/agent/{thread_id}"


def list_agencies() -> Call[list[agency_queries.AgencyView]]:
    return Call("GET", "/agencies", list[agency_queries.AgencyView])


def create_agency(
    name: str, metadata: dict[str, str] | None = None
) -> Call[agency_queries.AgencyView]:
    return Call(
        "POST",
        "/agencies",
        agency_queries.AgencyView,
        json={"name": name, "metadata": metadata or {}},
    )


class BlueprintInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A blueprint as listed; its `config` is left as JSON (its schema is the server's)."""

    name: str
    description: str = ""
    prompt: str = ""
    model: str = ""
    tags: list[str] = []
    type: str = "ai_human"
    config: dict[str, Any] = {}


def list_blueprints(agency_id: str) -> Call[list[BlueprintInfo]]:
    return Call("GET", f"/agency/{agency_id}/blueprints", list[BlueprintInfo])


def list_threads(agency_id: str) -> Call[list[queries.ThreadView]]:
    return Call("GET", f"/agency/{agency_id}/agents", list[queries.ThreadView])


class StartOptions(TypedDict, total=False):
    """What a run is started with beside its message: the files it adds to the thread and
    the key that makes a repeat of it one run."""

    files: dict[str, str] | None
    idempotency_key: str | None


def create_thread(
    agency_id: str,
    agent_type: str,
    metadata: dict[str, str] | None = None,
    text: str | None = None,
    **options: Unpack[StartOptions],
) -> Call[ThreadOut]:
    """A thread; with `text` (or `files`), its first run started by the same request: the
    answer's `run_id` and `run_status` name it, as an invoke's would."""
    body = _started({"agentType": agent_type, "metadata": metadata or {}}, text, options)
    return Call("POST", f"/agency/{agency_id}/agents", ThreadOut, json=body)


class InvokeOptions(StartOptions, total=False):
    """An invoke's options: those of any start, and what it does beside a run in progress
    (default `"queue"`)."""

    strategy: Strategy


def invoke(
    agency_id: str, thread_id: str, text: str | None = None, **options: Unpack[InvokeOptions]
) -> Call[RunAccepted]:
    body = _started({"strategy": options.get("strategy", "queue")}, text, options)
    return Call("POST", thread_path(agency_id, thread_id) + "/invoke", RunAccepted, json=body)


def _started(body: dict[str, Any], text: str | None, options: StartOptions) -> dict[str, Any]:
    """`body` with a run's start: the user's message, the files, the idempotency key."""
    if text is not None:
        body["messages"] = [{"role": "user", "content": text}]
    if files := options.get("files"):
        body["files"] = files
    if (key := options.get("idempotency_key")) is not None:
        body["idempotencyKey"] = key
    return body


class ApproveOptions(TypedDict, total=False):
    """An approval's options: the calls as the person changed them, why (default none), and
    the run it answers (default the thread's active one)."""

    modified_tool_calls: list[dict[str, Any]] | None
    reason: str
    run_id: str | None


def approve(
    agency_id: str, thread_id: str, approved: bool = True, **options: Unpack[ApproveOptions]
) -> Call[RunCommandAccepted]:
    body: dict[str, Any] = {"approved": approved, "reason": options.get("reason", "")}
    if (modified := options.get("modified_tool_calls")) is not None:
        body["modifiedToolCalls"] = modified
    if (run_id := options.get("run_id")) is not None:
        body["runId"] = run_id
    path = thread_path(agency_id, thread_id) + "/approve"
    return Call("POST", path, RunCommandAccepted, json=body)


def cancel(
    agency_id: str, thread_id: str, reason: str = "", run_id: str | None = None
) -> Call[CancelAccepted]:
    body: dict[str, Any] = {"reason": reason}
    if run_id is not None:
        body["runId"] = run_id
    path = thread_path(agency_id, thread_id) + "/cancel"
    return Call("POST", path, CancelAccepted, json=body)


def terminate(agency_id: str, thread_id: str, reason: str = "") -> Call[TerminateAccepted]:
    """Shut the thread down for good: its run ends canceled, later invokes are refused."""
    path = thread_path(agency_id, thread_id) + "/terminate"
    return Call("POST", path, TerminateAccepted, json={"reason": reason})


def delete_thread(thread_id: str) -> Call[ThreadDeletion]:
    """Erase the thread and its subagent tree for good (docs/data.md); reads of it
    answer 410 afterwards. A repeat answers the first deletion."""
    return Call("DELETE", f"/threads/{thread_id}", ThreadDeletion)


def delete_agency(agency_id: str) -> Call[AgencyDeletion]:
    """Erase every thread of the agency, then the agency (docs/data.md): its threads
    answer 410 afterwards, its routes 404. A repeat answers the first deletion."""
    return Call("DELETE", f"/agencies/{agency_id}", AgencyDeletion)


def forget_end_user(end_user_id: str) -> Call[EndUserForgetting]:
    """Erase every thread created for the end user, across the tenant's agencies
    (docs/data.md); the request is recorded, and a repeat erases what is left."""
    return Call("POST", f"/users/{end_user_id}/forget", EndUserForgetting)


def state(agency_id: str, thread_id: str) -> Call[state_queries.ThreadStateView]:
    return Call("GET", thread_path(agency_id, thread_id) + "/state", state_queries.ThreadStateView)


def events(
    agency_id: str,
    thread_id: str,
    from_seq: int = 0,
    limit: int = 100,
    types: list[str] | None = None,
) -> Call[EventsPage]:
    params: dict[str, Any] = {"fromSeq": from_seq, "limit": limit}
    if types:
        params["type"] = types
    return Call("GET", thread_path(agency_id, thread_id) + "/events", EventsPage, params=params)


_view = msgspec.json.Decoder(EventView)


def decode_event(data: str) -> EventView:
    return _view.decode(data)


# The run's status each event type leaves it in; a follow ends at the ones that end a wait.
RUN_STATUS_OF: dict[str, RunStatus] = {
    "run.started": "running",
    "run.resumed": "running",
    "run.paused": "paused",
    "run.completed": "completed",
    "run.canceled": "canceled",
    "run.error": "error",
    "request.rejected": "rejected",
}
RUN_STOPS = frozenset(
    {"run.paused", "run.completed", "run.canceled", "run.error", "request.rejected"}
)


def followed(event: EventView, runs: set[str]) -> bool:
    """Whether a follow of `runs` shows the event. A request of `runs` that joins another run
    (one running, or one out of steps that it continues) adds that run to `runs`: its events
    are the request's from then on."""
    data = event.data
    if event.type == "request.injected" and data.get("requestRunId") in runs:
        runs.add(str(data.get("runId")))
        return True
    return event.run_id in runs or data.get("runId") in runs


def ends_follow(event: EventView, runs: set[str]) -> bool:
    """The event stops a run of `runs` from going on by itself: it ended, or it waits for a
    person (a pause for its subagents is not one: the run resumes when they report)."""
    if event.type not in RUN_STOPS or event.data.get("runId") not in runs:
        return False
    return not (event.type == "run.paused" and event.data.get("reason") == "subagent")


ARCHIVE = "application/gzip"


def export_thread(agency_id: str, thread_id: str) -> Call[bytes]:
    """An archive (`.tar.gz`) of a root thread, its subagents and its agency's events."""
    return Call("GET", f"{thread_path(agency_id, thread_id)}/export", bytes)


def export_agency(agency_id: str) -> Call[bytes]:
    """An archive of the agency and every thread in it."""
    return Call("GET", f"/agency/{agency_id}/export", bytes)


def export_tenant(end_user_id: str | None = None) -> Call[bytes]:
    """An archive of the caller's whole tenant, or of one end user's threads."""
    params = {"endUserId": end_user_id} if end_user_id is not None else {}
    return Call("GET", "/export", bytes, params=params)


def import_archive(archive: bytes) -> Call[ArchiveImported]:
    """Write a thread's, an agency's or an end user's archive into the caller's tenant."""
    headers = {"Content-Type": ARCHIVE}
    return Call("POST", "/import", ArchiveImported, headers=headers, content=archive)
