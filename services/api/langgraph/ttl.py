"""LangGraph's thread `ttl` (`{"strategy": "delete", "ttl": <minutes>}`) as the thread's
own retention (`thread.retention_set`, docs/data.md "Retention"): the thread is deleted
once it has been idle that long, or its agency's retention if that is shorter."""

from __future__ import annotations

from typing import Any

from litestar.exceptions import ClientException, ValidationException

from agency.contracts.commands import SetThreadRetention
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.readback import send_and_read
from agency.services.threads.retention_policy import refusal

# LangGraph's minutes; fractions are taken as they come (0.1 is 6 seconds).
MAX_TTL_MINUTES = 60 * 24 * 365 * 100


def ttl_seconds(ttl: dict[str, Any] | None) -> float | None:
    """The seconds a `ttl` asks for (None: no ttl), or 400 naming what does not map."""
    if not ttl:
        return None
    unknown = sorted(set(ttl) - {"strategy", "ttl"})
    if unknown:
        raise ValidationException(f"ttl has the keys `strategy` and `ttl`, not {unknown[0]!r}")
    strategy = ttl.get("strategy", "delete")
    if strategy != "delete":
        raise ValidationException(
            f"ttl strategy {strategy!r} does not map: only 'delete' (the whole thread is "
            "deleted; the log keeps every step of a thread it keeps)"
        )
    minutes = ttl.get("ttl")
    if (
        not isinstance(minutes, int | float)
        or isinstance(minutes, bool)
        or not 0 < minutes <= MAX_TTL_MINUTES
    ):
        raise ValidationException(f"ttl.ttl is minutes, more than 0, not {minutes!r}")
    return float(minutes) * 60


async def set_ttl(deps: ApiDeps, tenant: str, view: GraphView, seconds: float) -> None:
    """The thread's retention set to `seconds` (409 beyond the operator's maximum)."""
    if view.created is None:
        raise ClientException(
            status_code=409,
            detail=f"thread {view.thread_id} is created by its first run: its ttl has nowhere "
            "to live until then (create it with `threads.create(graph_id=…)`)",
        )
    problem = refusal(seconds, deps.settings.retention.max_seconds, "the operator's maximum")
    if problem is not None:
        raise ClientException(status_code=409, detail=f"ttl: {problem}")
    command = SetThreadRetention(
        agency_id=view.created.agency_id, thread_id=view.thread_id, seconds=seconds
    )
    await send_and_read(deps, tenant, "thread", view.thread_id, command)
