"""An invoke while the tenant's or the agency's spend budget is spent answers 429, naming
the budget and when it resets (`services/tenancy/spend.py`); the runtime refuses the model
calls of runs that came in another way, and of runs admitted while the spend the door
knew was at most `REFRESH_SECONDS` old."""

from __future__ import annotations

from datetime import UTC, datetime

from litestar.exceptions import HTTPException

from agency.services.api.deps import ApiDeps
from agency.services.tenancy.fairness import retry_after_header
from agency.services.tenancy.spend import Spent, period_end
from agency.services.tenancy.spend_ledger import REFRESH_SECONDS


async def refuse_over_budget(deps: ApiDeps, tenant: str, agency_id: str) -> None:
    now = datetime.now(UTC)
    reason = await deps.spend.refusal(tenant, agency_id, Spent(), now, fresh_within=REFRESH_SECONDS)
    if reason is not None:
        wait = (period_end(deps.spend.settings.period, now) - now).total_seconds()
        raise HTTPException(
            status_code=429, detail=reason, headers={"Retry-After": retry_after_header(wait)}
        )
