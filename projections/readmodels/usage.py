"""Model usage per tenant, agency, blueprint and model: calls, tokens and cost.

Self-contained, as every projection is rebuilt alone: it keeps its own small map of each
thread's agency and current blueprint (`usage_threads`), so a call is counted against the
blueprint in control of the thread when it was made. Cost is `numeric`, summed exactly,
so totals are the same however the events were batched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal

from agency.contracts.envelope import Envelope
from agency.contracts.events import BlueprintSwitched, ModelCompleted, ThreadCreated
from agency.projections.statements import Statement, Table, statement_projection

THREAD_TABLE = Table(
    "usage_threads",
    {
        "tenant_id": "text NOT NULL",
        "thread_id": "text NOT NULL",
        "agency_id": "text NOT NULL",
        "agent_type": "text NOT NULL",
    },
    ("tenant_id", "thread_id"),
)
TOTAL_TABLE = Table(
    "usage_totals",
    {
        "tenant_id": "text NOT NULL",
        "agency_id": "text NOT NULL",
        "blueprint": "text NOT NULL",
        "model": "text NOT NULL",
        "calls": "bigint NOT NULL",
        "input_tokens": "bigint NOT NULL",
        "output_tokens": "bigint NOT NULL",
        "cost_usd": "numeric NOT NULL",
    },
    ("tenant_id", "agency_id", "blueprint", "model"),
)
DDL = THREAD_TABLE.ddl + TOTAL_TABLE.ddl.lstrip("\n")

_THREAD = THREAD_TABLE.upsert
_SWITCHED = "UPDATE usage_threads SET agent_type = $3 WHERE tenant_id = $1 AND thread_id = $2"
# A call on a thread never seen is still counted: under the envelope's agency, no blueprint.
_CALL = """
INSERT INTO usage_totals AS u
    (tenant_id, agency_id, blueprint, model, calls, input_tokens, output_tokens, cost_usd)
SELECT $1, coalesce(t.agency_id, $3, ''), coalesce(t.agent_type, ''), $4, 1, $5, $6, $7
FROM (SELECT 1) AS one
LEFT JOIN usage_threads AS t ON t.tenant_id = $1 AND t.thread_id = $2
ON CONFLICT (tenant_id, agency_id, blueprint, model) DO UPDATE SET
    calls = u.calls + 1,
    input_tokens = u.input_tokens + EXCLUDED.input_tokens,
    output_tokens = u.output_tokens + EXCLUDED.output_tokens,
    cost_usd = u.cost_usd + EXCLUDED.cost_usd
"""


def _statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        thread = (env.tenant_id, env.aggregate_id)
        match env.payload:
            case ThreadCreated(agency_id=agency_id, agent_type=agent_type):
                yield _THREAD, (*thread, agency_id, agent_type)
            case BlueprintSwitched(to_agent_type=agent_type):
                yield _SWITCHED, (*thread, agent_type)
            case ModelCompleted(model=model, usage=usage, cost_usd=cost):
                yield (
                    _CALL,
                    (
                        *thread,
                        env.agency_id,
                        model,
                        usage.input_tokens,
                        usage.output_tokens,
                        Decimal(repr(cost)),
                    ),
                )


_HANDLES = {"thread.created", "thread.blueprint_switched", "model.completed"}
PROJECTION = statement_projection(
    "usage",
    DDL,
    _statements,
    _HANDLES,
    tables=("usage_threads", "usage_totals"),
    aggregate="thread",
)
