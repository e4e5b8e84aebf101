"""The deliveries of webhook subscriptions in PostgreSQL (`webhook_deliveries`, migration
005): one row per (subscription, event), written once as the event is read from the log,
then updated by each attempt. The row is the delivery's schedule, so a restarted service
goes on where the last one stopped.

A task's A2A push notifications are deliveries of the same table (`kind` `a2a.push`, the
subscription being the config: `<task id>/<config id>`), made by `push.py`; what
authenticates them is read from `push_configs` as a subscription's secret is read from
`webhook_subscriptions`, on each attempt, so a config removed is delivered no more.

An attempt is claimed by moving `next_attempt_at` a lease ahead (`FOR UPDATE SKIP LOCKED`:
several processes share the table); a process that dies mid-attempt leaves the delivery
to be attempted again once the lease has passed. Delivery is therefore at least once, and
each delivery keeps one `webhook-id` (`delivery_id`) that receivers deduplicate on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg

from agency.infra.retry import RetryPolicy
from agency.services.a2a.push import PUSH_KIND, push_key

# Standard Webhooks' habit: attempts spread over about a day (5 s, 30 s, 3 min, 18 min,
# 1.8 h, 10 h, … after each failure), then the delivery is given up (`failed`).
SCHEDULE = RetryPolicy(
    attempts=None,
    timeout=24 * 3600.0,
    wait_initial=5.0,
    wait_exp_base=6.0,
    wait_max=10 * 3600.0,
    wait_jitter=1.0,
)


def delivery_id(subscription_id: str, event_id: str) -> str:
    """The `webhook-id` of an event's delivery to a subscription: the same however often
    the event is read."""
    digest = hashlib.sha256(f"{subscription_id}\x1f{event_id}".encode()).hexdigest()
    return "msg_" + digest[:32]


@dataclass(frozen=True, slots=True)
class Due:
    """A delivery claimed for one attempt, with what it takes to make it."""

    delivery_id: str
    tenant_id: str
    kind: str
    subscription_id: str
    url: str
    body: bytes
    attempts: int  # this one included
    created_at: datetime
    # The subscription's sealed secret (a push config's sealed auth); None: removed since.
    sealed_secret: str | None


_ENQUEUE = """
INSERT INTO webhook_deliveries (delivery_id, tenant_id, agency_id, subscription_id, event_id,
    kind, url, body, next_attempt_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), now())
ON CONFLICT (delivery_id) DO NOTHING
"""
_MATCHING = """
SELECT subscription_id, url FROM webhook_subscriptions
WHERE tenant_id = $1 AND agency_id = $2 AND $3 = ANY(kinds) AND created_at <= $4
"""
_WORKFLOW_AGENCY = "SELECT agency_id FROM workflows WHERE tenant_id = $1 AND workflow_id = $2"
_CLAIM = """
WITH due AS (
    SELECT delivery_id FROM webhook_deliveries
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => $2)
FROM due WHERE d.delivery_id = due.delivery_id
RETURNING d.delivery_id, d.tenant_id, d.agency_id, d.kind, d.subscription_id, d.url, d.body,
    d.attempts, d.created_at
"""
_MATCHING_PUSH = """
SELECT config_id, url FROM push_configs
WHERE tenant_id = $1 AND agency_id = $2 AND task_id = $3 AND created_at <= $4
ORDER BY config_id
"""
_PUSH_AUTH = """
SELECT tenant_id, agency_id, task_id || '/' || config_id AS subscription_id,
    sealed_auth AS sealed_secret, url
FROM push_configs
WHERE (tenant_id, agency_id, task_id, config_id) IN (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))
"""
_SECRETS = """
SELECT tenant_id, agency_id, subscription_id, sealed_secret, url FROM webhook_subscriptions
WHERE (tenant_id, agency_id, subscription_id) IN (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
"""
_DELIVERED = """
UPDATE webhook_deliveries SET status = 'delivered', delivered_at = now(), last_status = $2,
    last_error = NULL
WHERE delivery_id = $1
"""
_FAILED = """
UPDATE webhook_deliveries SET status = $2, next_attempt_at = $3, last_status = $4,
    last_error = $5
WHERE delivery_id = $1
"""


class Deliveries:
    def __init__(self, pool: asyncpg.Pool, *, schedule: RetryPolicy = SCHEDULE) -> None:
        self._pool = pool
        self._schedule = schedule

    async def enqueue(
        self, tenant: str, agency: str, kind: str, event_id: str, at: datetime, body: bytes
    ) -> int:
        """A delivery for each subscription of the agency to `kind` made by `at` (a
        delivery made already is kept as it is); how many subscriptions matched."""
        async with self._pool.acquire() as conn, conn.transaction():
            matching = await conn.fetch(_MATCHING, tenant, agency, kind, at)
            rows = [
                (
                    delivery_id(m["subscription_id"], event_id),
                    tenant,
                    agency,
                    m["subscription_id"],
                    event_id,
                    kind,
                    m["url"],
                    body,
                )
                for m in matching
            ]
            if rows:
                await conn.executemany(_ENQUEUE, rows)
        return len(rows)

    async def push_configs(self, tenant: str, agency: str, task_id: str, at: datetime) -> int:
        """How many push configs the task has that were made by `at`."""
        async with self._pool.acquire() as conn:
            return len(await conn.fetch(_MATCHING_PUSH, tenant, agency, task_id, at))

    async def enqueue_push(
        self,
        tenant: str,
        agency: str,
        task_id: str,
        event_id: str,
        at: datetime,
        bodies: list[bytes],
    ) -> int:
        """A delivery of each body for each push config of the task made by
        `at`; how many configs matched."""
        async with self._pool.acquire() as conn, conn.transaction():
            matching = await conn.fetch(_MATCHING_PUSH, tenant, agency, task_id, at)
            rows: list[tuple[str, str, str, str, str, str, str, bytes]] = []
            for m in matching:
                key = push_key(task_id, m["config_id"])
                rows.extend(
                    (delivery_id(key, f"{event_id}:{i}"), tenant, agency, key, event_id,
                     PUSH_KIND, m["url"], body)
                    for i, body in enumerate(bodies)
                )  # fmt: skip
            if rows:
                await conn.executemany(_ENQUEUE, rows)
        return len(matching)

    async def workflow_agency(self, tenant: str, workflow_id: str) -> str | None:
        """The agency of a workflow, as the `workflows` read model has it."""
        agency: str | None = await self._pool.fetchval(_WORKFLOW_AGENCY, tenant, workflow_id)
        return agency

    async def claim(self, limit: int, lease: float) -> list[Due]:
        """Up to `limit` deliveries whose attempt is due, each leased for `lease` seconds."""
        async with self._pool.acquire() as conn, conn.transaction():
            claimed = await conn.fetch(_CLAIM, limit, lease)
            if not claimed:
                return []
            keys = [(r["tenant_id"], r["agency_id"], r["subscription_id"]) for r in claimed]
            hooks = [k for k, r in zip(keys, claimed, strict=True) if r["kind"] != PUSH_KIND]
            pushes = [
                (tenant, agency, *key.split("/", 1))
                for (tenant, agency, key), r in zip(keys, claimed, strict=True)
                if r["kind"] == PUSH_KIND
            ]
            found = []
            if hooks:
                found += await conn.fetch(_SECRETS, *map(list, zip(*hooks, strict=True)))
            if pushes:
                found += await conn.fetch(_PUSH_AUTH, *map(list, zip(*pushes, strict=True)))
        subscriptions = {(r["tenant_id"], r["agency_id"], r["subscription_id"]): r for r in found}
        due = []
        for r, key in zip(claimed, keys, strict=True):
            subscription = subscriptions.get(key)
            due.append(
                Due(
                    delivery_id=r["delivery_id"],
                    tenant_id=r["tenant_id"],
                    kind=r["kind"],
                    subscription_id=r["subscription_id"],
                    url=subscription["url"] if subscription else r["url"],
                    body=bytes(r["body"]),
                    attempts=r["attempts"],
                    created_at=r["created_at"],
                    sealed_secret=subscription["sealed_secret"] if subscription else None,
                )
            )
        return due

    async def delivered(self, due: Due, status: int) -> None:
        await self._pool.execute(_DELIVERED, due.delivery_id, status)

    async def failed(self, due: Due, error: str, status: int | None, *, final: bool = False) -> str:
        """Record a failed attempt and schedule the next, unless `final` or the schedule is
        spent; the delivery's status after it."""
        wait = timedelta(seconds=self._schedule.delay(due.attempts))
        now = datetime.now(UTC)
        budget = self._schedule.timeout
        spent = budget is not None and now + wait > due.created_at + timedelta(seconds=budget)
        state = "failed" if final or spent else "pending"
        await self._pool.execute(_FAILED, due.delivery_id, state, now + wait, status, error[:1000])
        return state
