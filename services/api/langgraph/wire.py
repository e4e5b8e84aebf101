"""LangGraph Agent Server bodies, as the `langgraph-sdk` client sends and reads them.

This surface speaks LangGraph's own wire format, which is snake_case: an explicit exception
to the API's camelCase rule, confined to `/langgraph/…` (see `docs/langgraph.md`). Request
bodies name every field the SDK sends; unknown fields are refused like everywhere else.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec
from litestar.connection import ASGIConnection
from litestar.exceptions import ValidationException

from agency.services.api.text import refuse_nul

# What a route hands on to the code that starts runs: an HTTP request or a WebSocket (its
# headers name the agency; its app's state says when the server is closing).
Connection = ASGIConnection[Any, Any, Any, Any]

ThreadStatus = Literal["idle", "busy", "interrupted", "error"]
RunStatus = Literal["pending", "running", "error", "success", "timeout", "interrupted"]
MultitaskStrategy = Literal["reject", "interrupt", "rollback", "enqueue"]
SortOrder = Literal["asc", "desc"]
# The most items a page of a listing or a search holds.
MAX_PAGE = 1000


class Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    def __post_init__(self) -> None:
        refuse_nul(self)


class Out(msgspec.Struct, frozen=True, kw_only=True):
    pass


class Page(Body, frozen=True, kw_only=True):
    """A listing's page: at most `limit` items, after the first `offset`."""

    limit: int = 10
    offset: int = 0

    def checked(self) -> tuple[int, int]:
        """`(limit, offset)`; 400 past `MAX_PAGE` items or before the first."""
        if not 1 <= self.limit <= MAX_PAGE or self.offset < 0:
            raise ValidationException(f"limit must be 1 to {MAX_PAGE} and offset 0 or more")
        return self.limit, self.offset


class Search(Page, frozen=True, kw_only=True):
    """A search's page, in the order asked (each search sorts by keys of its own), with
    only the `select`ed fields of each item."""

    sort_order: SortOrder | None = None
    select: list[str] | None = None


# --- assistants ------------------------------------------------------------------------


class AssistantSearch(Search, frozen=True, kw_only=True):
    metadata: dict[str, Any] | None = None
    graph_id: str | None = None
    name: str | None = None
    sort_by: str | None = None


class Assistant(Out, frozen=True, kw_only=True):
    assistant_id: str
    graph_id: str
    config: dict[str, Any]
    context: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any]
    version: int
    name: str
    description: str | None


# --- threads ---------------------------------------------------------------------------


class ThreadCreate(Body, frozen=True, kw_only=True):
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None
    supersteps: list[dict[str, Any]] | None = None
    ttl: dict[str, Any] | None = None


class ThreadSearch(Search, frozen=True, kw_only=True):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    ids: list[str] | None = None
    status: ThreadStatus | None = None
    sort_by: Literal["thread_id", "status", "created_at", "updated_at"] | None = None
    extract: dict[str, str] | None = None


class Interrupt(Out, frozen=True, kw_only=True):
    value: Any
    id: str


class Thread(Out, frozen=True, kw_only=True):
    thread_id: str
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any]
    status: ThreadStatus
    values: dict[str, Any]
    interrupts: dict[str, list[Interrupt]]


class Checkpoint(Out, frozen=True, kw_only=True):
    thread_id: str
    checkpoint_ns: str = ""
    checkpoint_id: str | None = None
    checkpoint_map: dict[str, Any] | None = None


class ThreadTask(Out, frozen=True, kw_only=True):
    id: str
    name: str
    error: str | None = None
    interrupts: list[Interrupt]
    checkpoint: Checkpoint | None = None
    state: None = None
    result: dict[str, Any] | None = None


class ThreadState(Out, frozen=True, kw_only=True):
    values: dict[str, Any]
    next: list[str]
    checkpoint: Checkpoint
    metadata: dict[str, Any]
    created_at: datetime | None
    parent_checkpoint: Checkpoint | None
    tasks: list[ThreadTask]
    interrupts: list[Interrupt]


class HistoryBody(Body, frozen=True, kw_only=True):
    limit: int = 10
    before: str | dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    select: list[str] | None = None


# --- runs ------------------------------------------------------------------------------


class Command(Body, frozen=True, kw_only=True):
    resume: Any = None
    goto: Any = None
    update: Any = None


class RunCreate(Body, frozen=True, kw_only=True):
    """Every field of the SDK's `runs.create`, `runs.stream` and `runs.wait`."""

    assistant_id: str
    input: dict[str, Any] | None = None
    command: Command | None = None
    stream_mode: str | list[str] = "values"
    stream_subgraphs: bool = False
    stream_resumable: bool = False
    metadata: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    checkpoint_during: bool | None = None
    interrupt_before: str | list[str] | None = None
    interrupt_after: str | list[str] | None = None
    feedback_keys: list[str] | None = None
    webhook: str | None = None
    multitask_strategy: MultitaskStrategy | None = None
    if_not_exists: Literal["create", "reject"] | None = None
    on_disconnect: Literal["cancel", "continue"] | None = None
    on_completion: Literal["delete", "keep"] | None = None
    after_seconds: int | None = None
    durability: Literal["sync", "async", "exit"] | None = None
    strict_resume: bool | None = None
    langsmith_tracer: dict[str, Any] | None = None


class Run(Out, frozen=True, kw_only=True):
    run_id: str
    thread_id: str
    assistant_id: str
    created_at: datetime
    updated_at: datetime
    status: RunStatus
    metadata: dict[str, Any]
    multitask_strategy: MultitaskStrategy
    kwargs: dict[str, Any] = {}
