"""The HTTP contract both sides share: the response bodies the API states and the Python
client (`services/client`) decodes.

camelCase on the wire (`rename="camel"`), as everything HTTP speaks; the struct names are
the schema names of the OpenAPI document. Only what the client reads is here: the API's
other bodies stay beside their routes. Pure msgspec: how an envelope becomes an
`EventView` is the API's (`services/api/eventview.py`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

# `pending`: the invoke is stored, the runtime has not answered yet; `queued`: accepted,
# waiting for the thread's active run; `rejected`: refused by the `reject` strategy.
RunStatus = Literal[
    "pending", "queued", "running", "paused", "completed", "canceled", "error", "rejected"
]


class Out(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Response bodies: camelCase on the wire."""


class ForkOut(Out, frozen=True, kw_only=True):
    """A fork (`POST …/fork`, `agency fork --json`): the new thread, and what came along."""

    thread_id: str
    forked_from: str
    at_seq: int
    # Original child thread id → its fork, for children forked along with the thread.
    children: dict[str, str]
    canceled_runs: list[str]


class ThreadOut(Out, frozen=True, kw_only=True, omit_defaults=True):
    """A thread created; with the run its first messages started (`POST …/agents` with
    `messages` or `files`), that run's id and its status when the answer was given."""

    id: str
    agent_type: str
    agency_id: str
    created_at: datetime
    metadata: dict[str, str]
    run_id: str | None = None
    run_status: RunStatus | None = None


class ArchiveImported(Out, frozen=True, kw_only=True):
    """What an import wrote (`POST /import`, `POST /tenants/import`)."""

    kind: Literal["thread", "agency", "tenant", "user"]
    tenant_id: str
    # The exported thread's, agency's, tenant's or end user's id in this deployment.
    id: str
    # The threads written (one the tenant held whole already is not).
    threads: list[str]
    events: int
    # Ids the tenant derives that changed with it (subagents' threads and runs): old → new.
    remapped: dict[str, str]
    # What the tenant had already and kept (a thread archive's agency).
    kept: list[str]


class RunAccepted(Out, frozen=True, kw_only=True, omit_defaults=True):
    """The run the invoke starts and its status when the answer was given; `reason`: why
    it was refused, when its status is `rejected`."""

    run_id: str
    status: RunStatus
    reason: str | None = None


class TerminateAccepted(Out, frozen=True, kw_only=True):
    """`terminating` (sent; the thread's state follows the log) or `terminated` (it was
    already: nothing sent)."""

    thread_id: str
    status: Literal["terminating", "terminated"]


class ThreadDeletion(Out, frozen=True, kw_only=True):
    """A thread's deletion (`DELETE /threads/{threadId}`, docs/data.md): when, at whose
    request, and the threads of its subagent tree, deleted with it.
    `readModelsCaughtUp`: whether the read models had dropped their rows when it answered."""

    thread_id: str
    root_thread_id: str
    deleted_at: datetime
    requested_by: str
    threads: list[str]
    read_models_caught_up: bool = True


class EndUserForgetting(Out, frozen=True, kw_only=True):
    """An end user forgotten (`POST /users/{endUserId}/forget`, docs/data.md): the request
    as recorded (`requestId`, at whose request, when) and the root threads it deleted, each
    with its subagent tree. `readModelsCaughtUp`: whether the read models had dropped their
    rows when it answered."""

    end_user_id: str
    request_id: str
    requested_at: datetime
    requested_by: str
    threads: list[str]
    read_models_caught_up: bool = True


class AgencyDeletion(Out, frozen=True, kw_only=True):
    """An agency deleted (`DELETE /agencies/{agencyId}`, docs/data.md): the request as
    recorded, and the root threads deleted with it (each with its subagent tree)."""

    agency_id: str
    request_id: str
    requested_at: datetime
    requested_by: str
    threads: list[str]
    read_models_caught_up: bool = True


class TenantDeletion(Out, frozen=True, kw_only=True):
    """A tenant deleted (`DELETE /tenants/{tenantId}`, docs/data.md): the request as
    recorded, the agencies deleted with it and the API keys revoked."""

    tenant_id: str
    request_id: str
    requested_at: datetime
    requested_by: str
    deleted_at: datetime
    agencies: list[str]
    api_keys_revoked: list[str]
    read_models_caught_up: bool = True


class RunCommandAccepted(Out, frozen=True, kw_only=True):
    run_id: str
    status: str = "accepted"


class CancelAccepted(Out, frozen=True, kw_only=True):
    """`runId`: the run the cancel is bound to; null for a thread with no active run whose
    subagents' runs the cancel reaches."""

    run_id: str | None
    status: str = "accepted"


class EventView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One event as HTTP clients see it.

    `seq` is the thread's own sequence (from 1, no gaps); `streamSeq` the position in the
    tenant-wide log. `data` is the payload in camelCase, without its `type`.
    """

    event_id: str
    thread_id: str | None
    run_id: str | None
    seq: int
    stream_seq: int
    ts: datetime
    type: str
    data: dict[str, Any]
    version: int
    agency_id: str | None
    aggregate: str
    aggregate_id: str
    correlation_id: str | None
    causation_id: str | None
    idempotency_key: str | None


class EventsPage(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A page of events as `EventView`s (the default, `format=view`)."""

    format: Literal["view"] = "view"
    events: list[EventView]
    has_more: bool
