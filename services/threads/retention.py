"""Threads past their retention deleted, as `DELETE /threads/{threadId}` deletes them
(docs/data.md, "Retention"; the levels in `retention_policy.py`).

A sweep asks the read models (folded from the log) for subagent trees whose last activity,
the latest event of any of their threads, is older than the root's retention, and none of
whose threads has a run in progress, waiting for approval or queued. Each such tree is
checked again on the log (the last event of each of its threads, so a run begun since the
read model looked keeps it) and deleted with `erasure.delete_tree`, at the request of
`retention`. What is due is always read afresh, never held: a process that was down
deletes on its first sweep, at its start, what fell due meanwhile. Several processes may
sweep at once: a deletion repeated is harmless. A tree that cannot be deleted now (the
store away) is tried again at the next sweep; the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg
import nats.js.errors
import structlog
from nats.errors import Error as NatsError

from agency.contracts.codec import decode_event
from agency.contracts.envelope import utc_now
from agency.contracts.sealed import PayloadErased
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import StoreError
from agency.services.threads.erasure import delete_tree
from agency.services.threads.retention_policy import EFFECTIVE_SQL, RetentionSettings

log = structlog.get_logger(__name__)

REQUESTED_BY = "retention"
# Trees deleted per sweep at most: the next sweep goes on with the rest.
BATCH = 200
# A run in progress, waiting for approval (or at a breakpoint), or accepted and not begun.
BUSY = ("running", "paused", "registered")

# Without an operator's default or maximum, only tenants that set a retention somewhere
# are looked at (`threads_with_retention` finds those that set one on a thread).
_DUE = f"""
WITH tenants_kept AS (
    SELECT tenant_id FROM tenants
    WHERE $1::double precision > 0 OR $2::double precision > 0 OR retention_seconds > 0
    UNION SELECT tenant_id FROM agencies WHERE retention_seconds > 0
    UNION SELECT DISTINCT tenant_id FROM threads WHERE retention_seconds IS NOT NULL
), trees AS (
    SELECT tenant_id, correlation_id AS root_id, max(updated_at) AS last_activity,
           bool_or(status = ANY($4::text[]) OR active_run_id IS NOT NULL) AS busy,
           array_agg(thread_id) AS threads
    FROM threads WHERE tenant_id IN (SELECT tenant_id FROM tenants_kept)
    GROUP BY tenant_id, correlation_id
)
SELECT r.tenant_id, r.thread_id, tr.threads, tr.last_activity, e.seconds
FROM threads r
JOIN trees tr ON tr.tenant_id = r.tenant_id AND tr.root_id = r.thread_id
LEFT JOIN tenants te ON te.tenant_id = r.tenant_id
LEFT JOIN agencies a ON a.tenant_id = r.tenant_id AND a.agency_id = r.agency_id
CROSS JOIN LATERAL (SELECT {EFFECTIVE_SQL} AS seconds) e
WHERE r.parent_thread_id IS NULL AND NOT tr.busy AND e.seconds IS NOT NULL
  AND tr.last_activity < $3::timestamptz - make_interval(secs => e.seconds)
ORDER BY tr.last_activity
LIMIT {BATCH}
"""


@dataclass(frozen=True, slots=True)
class DueTree:
    tenant_id: str
    root_thread_id: str
    threads: tuple[str, ...]
    last_activity: datetime
    seconds: float


async def due_trees(
    conn: asyncpg.Connection, settings: RetentionSettings, now: datetime
) -> list[DueTree]:
    """The trees past their retention at `now`, as the read models see them, oldest first."""
    rows = await conn.fetch(_DUE, settings.default_seconds, settings.max_seconds, now, list(BUSY))
    return [
        DueTree(
            tenant_id=r["tenant_id"],
            root_thread_id=r["thread_id"],
            threads=tuple(sorted(r["threads"])),
            last_activity=r["last_activity"],
            seconds=r["seconds"],
        )
        for r in rows
    ]


async def _last_activity(bus: Bus, tenant: str, thread_id: str) -> datetime | None:
    """When the thread's last event was stored, as the log has it (None: none, or none
    readable: its key is gone already, and the deletion is finished)."""
    subject = bus.store.subject(tenant, "thread", thread_id)
    try:
        msg = await bus.js.get_last_msg(bus.store.stream_of(thread_id), subject, direct=True)
        return decode_event(msg.data or b"").ts
    except (nats.js.errors.NotFoundError, PayloadErased):
        return None


class RetentionSweeper:
    """Every `settings.sweep_seconds` (and at once on start), deletes the due trees."""

    def __init__(self, bus: Bus, pool: asyncpg.Pool, settings: RetentionSettings) -> None:
        self._bus = bus
        self._pool = pool
        self._settings = settings

    async def sweep(self) -> list[str]:
        """One sweep: the root threads of the trees deleted."""
        now = utc_now()
        async with self._pool.acquire() as conn:
            due = await due_trees(conn, self._settings, now)
        deleted: list[str] = []
        for tree in due:
            try:
                if not await self._still_due(tree, now):
                    continue
                await delete_tree(
                    self._bus, tree.tenant_id, tree.root_thread_id, tree.threads, REQUESTED_BY
                )
            except (StoreError, NatsError) as e:
                # This tree at the next sweep; the others now.
                log.warning(
                    "retention could not delete a thread; trying again at the next sweep",
                    tenant_id=tree.tenant_id,
                    thread_id=tree.root_thread_id,
                    error=str(e),
                )
                continue
            deleted.append(tree.root_thread_id)
            log.info(
                "thread deleted by retention",
                tenant_id=tree.tenant_id,
                thread_id=tree.root_thread_id,
                last_activity=tree.last_activity.isoformat(),
                retention_seconds=tree.seconds,
            )
        return deleted

    async def _still_due(self, tree: DueTree, now: datetime) -> bool:
        """On the log: no thread of the tree has had an event since its retention began."""
        cutoff = now - timedelta(seconds=tree.seconds)
        for thread_id in tree.threads:
            last = await _last_activity(self._bus, tree.tenant_id, thread_id)
            if last is not None and last >= cutoff:
                return False
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Sweeps until `stop` is set; a sweep that fails (a server away) is tried again
        at the next."""
        if not self._settings.default_seconds:
            log.info("retention sweep started; no operator default (threads kept unless set)")
        while not stop.is_set():
            try:
                await self.sweep()
            except (OSError, asyncpg.PostgresError, NatsError, StoreError, TimeoutError) as e:
                log.warning("retention sweep failed; trying again", error=str(e))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._settings.sweep_seconds)
