"""`runs.create_batch`: several background runs in one request.

Each item is a `runs.create` body, with `thread_id` naming its thread or, without one, a
stateless run (a new thread of its assistant, as `POST /runs`). Every item is checked
before any run starts, so a batch with a bad item starts nothing: 400 naming the item.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar.exceptions import HTTPException, ValidationException
from litestar.params import JSONBody

from agency.services.api.auth import Deps
from agency.services.api.langgraph.answer import post_ok
from agency.services.api.langgraph.inputs import (
    invocation,
    refuse_thread_deletion,
    refuse_unmapped,
)
from agency.services.api.langgraph.routes_runs import run_in_background
from agency.services.api.langgraph.scope import (
    LgCaller,
    assistant_named,
    load_thread,
    new_thread,
    thread_id_of,
)
from agency.services.api.langgraph.webhook import webhook_of
from agency.services.api.langgraph.wire import Run, RunCreate

MAX_BATCH = 100


def _item(index: int, raw: Any) -> tuple[str | None, RunCreate]:
    if not isinstance(raw, dict):
        raise ValidationException(f"batch item {index}: a run is an object")
    body = dict(raw)
    thread_id = body.pop("thread_id", None)
    try:
        data = msgspec.convert(body, RunCreate)
    except msgspec.ValidationError as e:
        raise ValidationException(f"batch item {index}: {e}") from e
    if thread_id is not None and not isinstance(thread_id, str):
        raise ValidationException(f"batch item {index}: thread_id is a thread's id")
    return thread_id, data


@post_ok("/runs/batch", summary="LangGraph: start several background runs")
async def create_batch(data: JSONBody[list[Any]], caller: LgCaller, deps: Deps) -> list[Run]:
    tenant = caller.tenant
    if not 1 <= len(data) <= MAX_BATCH:
        raise ValidationException(f"a batch holds 1 to {MAX_BATCH} runs, not {len(data)}")
    items = [_item(i, raw) for i, raw in enumerate(data)]
    agency_id: str | None = None
    for index, (thread_id, run) in enumerate(items):
        try:
            refuse_unmapped(run)
            webhook_of(run.webhook)
            invocation(run.input)
            if run.command is not None:
                raise ValidationException("a batch starts runs: it resumes none (`command`)")
            if thread_id is None:
                agency_id = agency_id or await caller.agency()
                await assistant_named(deps, tenant, agency_id, run.assistant_id)
            else:
                refuse_thread_deletion(run)
                await load_thread(deps, tenant, thread_id_of(thread_id), deferred=True)
        except HTTPException as e:
            raise type(e)(
                detail=f"batch item {index}: {e.detail}", status_code=e.status_code
            ) from e
    started: list[Run] = []
    for thread_id, run in items:
        if thread_id is None:
            assert agency_id is not None
            thread_id = (await new_thread(deps, tenant, agency_id, run.assistant_id, {})).thread_id
        started.append((await run_in_background(caller, thread_id, run)).content)
    return started


BATCH_ROUTES = [create_batch]
