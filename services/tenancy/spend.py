"""Spend budgets: how many tokens, and how many USD, a tenant and each of its agencies may
spend on model calls in one period (a UTC day or month).

Three levels, each within the one above:
- the operator's defaults (`AGENCY_SPEND_PERIOD`, `AGENCY_TENANT_TOKEN_BUDGET`,
  `AGENCY_TENANT_USD_BUDGET`, `AGENCY_AGENCY_TOKEN_BUDGET`, `AGENCY_AGENCY_USD_BUDGET`);
- a tenant's budget, set by the operator (`tenant.budget_set`), replacing the defaults;
- an agency's budget, set by the tenant (`agency.budget_set`), never above the tenant's.

A model call is refused before it is made when what the scope spent this period, plus the
call's estimate (its request's size, the prompt included, at four characters a token,
priced as input), would pass a budget. What was spent is counted from the log's
`model.completed` events (their usage and cost), so every process agrees and a restart
forgets nothing. The decisions here are pure; `spend_ledger.py` reads the log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, TypeVar, cast

import msgspec

BUDGET_EXCEEDED = "budget_exceeded"

Period = Literal["day", "month"]
Scope = Literal["tenant", "agency"]
Num = TypeVar("Num", int, float)


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """Per period; 0 is no budget in that unit."""

    tokens: int = 0
    usd: float = 0.0

    def within(self, outer: Budget) -> Budget:
        """This budget, never above `outer` where `outer` has one."""
        return Budget(tokens=_least(self.tokens, outer.tokens), usd=_least(self.usd, outer.usd))


def _least(own: Num, outer: Num) -> Num:
    if not outer:
        return own
    if not own:
        return outer
    return min(own, outer)


class SpendSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The operator's defaults: every tenant's budget (unless the operator set its own)
    and every agency's (unless its tenant set one)."""

    period: Period = "day"
    tenant: Budget = Budget(tokens=10_000_000, usd=10.0)
    agency: Budget = Budget()

    @classmethod
    def from_env(cls) -> SpendSettings:
        default = cls()
        period = os.environ.get("AGENCY_SPEND_PERIOD", default.period)
        if period not in ("day", "month"):
            raise ValueError(f"AGENCY_SPEND_PERIOD is {period!r}: it must be day or month")
        env = os.environ.get
        return cls(
            period=cast(Period, period),
            tenant=Budget(
                tokens=int(env("AGENCY_TENANT_TOKEN_BUDGET", default.tenant.tokens)),
                usd=float(env("AGENCY_TENANT_USD_BUDGET", default.tenant.usd)),
            ),
            agency=Budget(
                tokens=int(env("AGENCY_AGENCY_TOKEN_BUDGET", default.agency.tokens)),
                usd=float(env("AGENCY_AGENCY_USD_BUDGET", default.agency.usd)),
            ),
        )


@dataclass(frozen=True, slots=True)
class Overrides:
    """What the log says of a tenant's and an agency's budgets (None: not set)."""

    tenant_tokens: int | None = None
    tenant_usd: float | None = None
    agency_tokens: int | None = None
    agency_usd: float | None = None


def budgets(settings: SpendSettings, overrides: Overrides) -> tuple[Budget, Budget]:
    """The tenant's and the agency's budgets in force."""
    tenant = Budget(
        tokens=_set_or(overrides.tenant_tokens, settings.tenant.tokens),
        usd=_set_or(overrides.tenant_usd, settings.tenant.usd),
    )
    agency = Budget(
        tokens=_set_or(overrides.agency_tokens, settings.agency.tokens),
        usd=_set_or(overrides.agency_usd, settings.agency.usd),
    ).within(tenant)
    return tenant, agency


def _set_or(value: Num | None, default: Num) -> Num:
    return default if value is None else value


@dataclass(frozen=True, slots=True)
class Spent:
    tokens: int = 0
    usd: float = 0.0

    def plus(self, tokens: int, usd: float) -> Spent:
        return Spent(tokens=self.tokens + tokens, usd=self.usd + usd)


def period_start(period: Period, now: datetime) -> datetime:
    now = now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return day if period == "day" else day.replace(day=1)


def period_end(period: Period, now: datetime) -> datetime:
    start = period_start(period, now)
    if period == "day":
        return datetime.fromordinal(start.toordinal() + 1).replace(tzinfo=UTC)
    if start.month == 12:
        return start.replace(year=start.year + 1, month=1)
    return start.replace(month=start.month + 1)


def estimate_tokens(chars: int) -> int:
    """A request's input tokens before it is sent: four characters a token."""
    return chars // 4 + 1


def refusal(
    scope: Scope,
    name: str,
    budget: Budget,
    spent: Spent,
    estimate: Spent,
    period: Period,
    now: datetime,
) -> str | None:
    """Why a call estimated at `estimate` may not be made, or None. A zero estimate asks
    whether the budget is spent already (an invoke at the door)."""
    resets = period_end(period, now).strftime("%Y-%m-%dT%H:%M:%SZ")
    head = f"{BUDGET_EXCEEDED}: the {scope} {name!r}"
    if budget.tokens and _over(spent.tokens, estimate.tokens, budget.tokens):
        more = f" and this model call needs about {estimate.tokens} more (the prompt counted)"
        return (
            f"{head} token budget is {budget.tokens} tokens a {period}; {spent.tokens} spent"
            f"{more if estimate.tokens else ''}; it resets at {resets}"
        )
    if budget.usd and _over(spent.usd, estimate.usd, budget.usd):
        more = f" and this model call costs about ${estimate.usd:.4f} more (the prompt counted)"
        return (
            f"{head} cost budget is ${budget.usd:g} a {period}; ${spent.usd:.4f} spent"
            f"{more if estimate.usd else ''}; it resets at {resets}"
        )
    return None


def _over(spent: Num, estimate: Num, budget: Num) -> bool:
    return spent + estimate > budget if estimate else spent >= budget
