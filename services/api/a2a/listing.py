"""ListTasks: the agent's tasks, most recently updated first, a page at a time.

The agent's contexts are the agency's root threads of the blueprint (the read models list
them, waiting for the creations this process answered); each thread's tasks are folded
from its log, so a task's state is never behind.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import get_args

from agency.projections import queries
from agency.services.a2a.tasks import RunTask, fold
from agency.services.a2a.wire import ListTasksRequest, ListTasksResponse, TaskState
from agency.services.api.a2a.agent import Agent
from agency.services.api.a2a.errors import InvalidParams, TaskNotFound
from agency.services.api.a2a.service import require_context

DEFAULT_PAGE = 50
MAX_PAGE = 100
# The contexts read at once when listing every context's tasks.
_READS_AT_ONCE = 8


async def list_tasks(agent: Agent, request: ListTasksRequest) -> ListTasksResponse:
    size = DEFAULT_PAGE if request.page_size is None else request.page_size
    if not 1 <= size <= MAX_PAGE:
        raise InvalidParams(f"pageSize must be 1 to {MAX_PAGE}, not {size}")
    if request.history_length is not None and request.history_length < 0:
        raise InvalidParams("historyLength must not be negative")
    offset = _offset(request.page_token)
    if request.context_id:
        try:
            await require_context(agent, request.context_id)
            threads = [request.context_id]
        except TaskNotFound:
            threads = []
    else:
        threads = await _contexts(agent)
    runs = await _runs(agent, threads)
    if request.status and request.status != "TASK_STATE_UNSPECIFIED":
        if request.status not in get_args(TaskState):
            raise InvalidParams(f"status {request.status[:40]!r} is not a TaskState")
        runs = [r for r in runs if r.state == request.status]
    if request.status_timestamp_after:
        after = _instant(request.status_timestamp_after)
        runs = [r for r in runs if datetime.fromisoformat(r.updated) > after]
    runs.sort(key=lambda r: (r.updated, r.run_id), reverse=True)
    page = runs[offset : offset + size]
    following = offset + size if offset + size < len(runs) else None
    artifacts = bool(request.include_artifacts)
    return ListTasksResponse(
        tasks=[r.task(request.history_length, artifacts=artifacts) for r in page],
        next_page_token="" if following is None else str(following),
        page_size=len(page),
        total_size=len(runs),
    )


def _instant(value: str) -> datetime:
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidParams(
            f"statusTimestampAfter {value[:40]!r} is not an RFC 3339 timestamp"
        ) from None
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)


def _offset(token: str) -> int:
    if not token:
        return 0
    if not token.isdigit() or len(token) > 9:
        raise InvalidParams(f"pageToken {token[:40]!r} is not one this server gave")
    return int(token)


async def _contexts(agent: Agent) -> list[str]:
    deps = agent.deps
    await deps.listings.listed(agent.tenant, deps.settings.read_your_writes_timeout)
    async with deps.pool.acquire() as conn:
        threads = await queries.list_threads(conn, agent.tenant, agent.agency_id)
    return [t.id for t in threads if t.parent is None and t.agent_type == agent.blueprint]


async def _runs(agent: Agent, threads: list[str]) -> list[RunTask]:
    limit = asyncio.Semaphore(_READS_AT_ONCE)

    async def read(thread_id: str) -> list[RunTask]:
        async with limit:
            events = await agent.deps.bus.store.read(agent.tenant, "thread", thread_id)
        return list(fold(thread_id, events).runs.values())

    found = await asyncio.gather(*(read(t) for t in threads))
    return [run for runs in found for run in runs]
