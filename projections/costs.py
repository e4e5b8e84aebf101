"""Tokens and cost of one thread, run by run, from the runs read model."""

from __future__ import annotations

import asyncpg

from agency.projections.queries import View
from agency.projections.rows import from_row


class RunCost(View, frozen=True, kw_only=True):
    run_id: str
    status: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float


class ThreadCost(View, frozen=True, kw_only=True):
    thread_id: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    runs: list[RunCost]


async def thread_cost(
    conn: asyncpg.Connection, tenant: str, agency_id: str, thread_id: str
) -> ThreadCost | None:
    """The thread's runs in order with their totals; None if the tenant has no such thread."""
    known = await conn.fetchval(
        "SELECT 1 FROM threads WHERE tenant_id = $1 AND agency_id = $2 AND thread_id = $3",
        tenant,
        agency_id,
        thread_id,
    )
    if known is None:
        return None
    rows = await conn.fetch(
        "SELECT run_id, status, model, input_tokens, output_tokens, cost_usd FROM runs "
        "WHERE tenant_id = $1 AND thread_id = $2 ORDER BY ordinal",
        tenant,
        thread_id,
    )
    runs = [
        from_row(
            RunCost,
            r,
            input_tokens=int(r["input_tokens"]),
            output_tokens=int(r["output_tokens"]),
            cost_usd=float(r["cost_usd"]),
        )
        for r in rows
    ]
    return ThreadCost(
        thread_id=thread_id,
        input_tokens=sum(r.input_tokens for r in runs),
        output_tokens=sum(r.output_tokens for r in runs),
        # Summed exactly in the database, so it matches the tenant's totals to the cent.
        cost_usd=float(sum((r["cost_usd"] for r in rows), start=0)),
        runs=runs,
    )
