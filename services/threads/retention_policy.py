"""How long threads are kept after their last activity (docs/data.md, "Retention").

Four levels, each in seconds, 0 or unset meaning "no limit of its own":

- the operator's default for tenants that set none (`AGENCY_RETENTION_DAYS`, off by
  default) and the operator's maximum (`AGENCY_RETENTION_MAX_DAYS`, none by default);
- a tenant's (`tenant.retention_set`), within the operator's maximum;
- an agency's (`agency.retention_set`), within its tenant's;
- a thread's (`thread.retention_set`, LangGraph's `ttl`), within its agency's.

A thread is kept for the shortest of them that is set: `effective_seconds`. The sweep
(`retention.py`) asks PostgreSQL the same in SQL (`EFFECTIVE_SQL`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg

DAY = 86400.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
DEFAULT_SWEEP_SECONDS = 300.0


def parse_days(text: str, variable: str) -> float:
    """A duration in seconds from days (`30`, `0.5`) or a number with a unit (`45s`, `10m`,
    `12h`, `30d`); `off` or `0` is none."""
    if text.strip().lower() in ("", "off", "0"):
        return 0.0
    found = _DURATION.match(text.lower())
    if found is None:
        raise ValueError(
            f"{variable}={text!r}: give days (30, 0.5) or a number with a unit "
            "(45s, 10m, 12h, 30d), or off"
        )
    number, unit = found.groups()
    return float(number) * _UNITS[unit or "d"]


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """The operator's: the default for tenants that set none, the maximum any level may
    set (0: none), and how often the sweep looks for threads past their retention."""

    default_seconds: float = 0.0
    max_seconds: float = 0.0
    sweep_seconds: float = DEFAULT_SWEEP_SECONDS

    @classmethod
    def from_env(cls) -> RetentionSettings:
        return cls.from_env_values(os.environ)

    @classmethod
    def from_env_values(cls, env: Mapping[str, str]) -> RetentionSettings:
        """The settings from `AGENCY_RETENTION_*` in `env`; ValueError for a bad one."""
        default = parse_days(env.get("AGENCY_RETENTION_DAYS", ""), "AGENCY_RETENTION_DAYS")
        maximum = parse_days(env.get("AGENCY_RETENTION_MAX_DAYS", ""), "AGENCY_RETENTION_MAX_DAYS")
        sweep_text = env.get("AGENCY_RETENTION_SWEEP_SECONDS", "")
        try:
            sweep = float(sweep_text) if sweep_text.strip() else DEFAULT_SWEEP_SECONDS
        except ValueError:
            sweep = -1.0
        if not sweep > 0:
            raise ValueError(f"AGENCY_RETENTION_SWEEP_SECONDS={sweep_text!r}: seconds, more than 0")
        if maximum and (not default or default > maximum):
            default = maximum  # the maximum bounds the default as it bounds every level
        return cls(default_seconds=default, max_seconds=maximum, sweep_seconds=sweep)


def shortest(*seconds: float | None) -> float:
    """The shortest of the limits that are set (None and 0 are none); 0 when none is."""
    limits = [s for s in seconds if s]
    return min(limits) if limits else 0.0


@dataclass(frozen=True, slots=True)
class Standing:
    """The levels as set (None: unset) and what holds for a scope."""

    settings: RetentionSettings
    tenant: float | None = None
    agency: float | None = None

    @property
    def tenant_seconds(self) -> float:
        """What the tenant's threads are kept for unless their agency keeps them shorter."""
        own = self.settings.default_seconds if self.tenant is None else self.tenant
        return shortest(own, self.settings.max_seconds)

    @property
    def agency_seconds(self) -> float:
        return shortest(self.agency, self.tenant_seconds)

    def thread_seconds(self, thread: float | None) -> float:
        return shortest(thread, self.agency_seconds)


def refusal(seconds: float | None, outer: float, outer_name: str) -> str | None:
    """Why a level of `seconds` may not be set within `outer` (0: no limit), or None."""
    if seconds is None:
        return None
    if not seconds >= 0:
        return "retention is 0 (no limit of its own) or more seconds, or null"
    if outer and seconds > outer:
        return f"retention must be within {outer_name}, {describe(outer)}"
    return None


def tenant_refusal(seconds: float | None, settings: RetentionSettings) -> str | None:
    """A tenant's level: 0 (keep) is refused while the operator has a maximum."""
    if seconds == 0 and settings.max_seconds:
        return f"retention must be within the operator's maximum, {describe(settings.max_seconds)}"
    return refusal(seconds, settings.max_seconds, "the operator's maximum")


def describe(seconds: float) -> str:
    if seconds >= DAY and seconds % DAY == 0:
        days = seconds / DAY
        return f"{days:g} day" if days == 1 else f"{days:g} days"
    return f"{seconds:g} seconds"


async def standing(
    conn: asyncpg.Connection, settings: RetentionSettings, tenant: str, agency: str = ""
) -> Standing:
    """The tenant's and the agency's levels as the read models hold them."""
    tenant_seconds = await conn.fetchval(
        "SELECT retention_seconds FROM tenants WHERE tenant_id = $1", tenant
    )
    agency_seconds = None
    if agency:
        agency_seconds = await conn.fetchval(
            "SELECT retention_seconds FROM agencies WHERE tenant_id = $1 AND agency_id = $2",
            tenant,
            agency,
        )
    return Standing(settings=settings, tenant=tenant_seconds, agency=agency_seconds)


# The seconds a root thread `r` is kept for, over its tenant `te` and agency `a` ($1: the
# operator's default, $2: the operator's maximum): the shortest level set, as `Standing`.
EFFECTIVE_SQL = (
    "LEAST(NULLIF(r.retention_seconds, 0), NULLIF(a.retention_seconds, 0), "
    "NULLIF(COALESCE(te.retention_seconds, $1::double precision), 0), "
    "NULLIF($2::double precision, 0))"
)
