"""The attempts of webhook deliveries: due rows of `webhook_deliveries` POSTed, signed
(an A2A push notification: with its config's `Authorization` and token instead).

Up to `concurrency` attempts run at once, each claimed with a lease (`deliveries.py`).
Each POST goes through the egress guard every connection made for a tenant goes through
(`services/egress.py`): the URL was checked as written when subscribed, and the address
its name resolves to is checked again on every connection (a name that turns private
later is refused). A 2xx answer delivers; anything else (another status, a connection
error, a timeout, a refusal) is recorded as the attempt's error and the next attempt is
scheduled, until the schedule is spent (`failed`). The loop never raises: a database
that is briefly away leaves the claimed deliveries to their leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import asyncpg
import httpx2
import structlog

from agency.infra.sealing import UnsealError, unseal
from agency.services.a2a.push import PUSH_KIND, push_headers
from agency.services.egress import EgressPolicy, EgressRefused, guarded_transport
from agency.services.webhook_signing import standard_headers
from agency.services.webhooks.deliveries import Deliveries, Due

log = structlog.get_logger(__name__)

SECRET_NAME = "secret"  # the name the API seals a subscription's secret under
# A database or network that is briefly away: the attempt's lease makes it due again.
_TRANSIENT = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    concurrency: int = 8
    # Seconds a claimed attempt is held before another may make it (a process that died).
    lease: float = 60.0
    # Seconds between looks for due attempts when nothing wakes the loop sooner.
    poll: float = 1.0
    # Seconds a receiver has to answer.
    timeout: float = 10.0
    # Seconds attempts under way may take to finish once the service is stopped.
    shutdown_grace: float = 5.0


class Dispatcher:
    def __init__(self, deliveries: Deliveries, settings: DispatchSettings | None = None) -> None:
        self._deliveries = deliveries
        self._settings = settings or DispatchSettings()
        self._changed = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        """New deliveries were made: look for due attempts now."""
        self._changed.set()

    async def run(self, stop: asyncio.Event) -> None:
        s = self._settings
        transport = guarded_transport(EgressPolicy.from_env())
        async with (
            httpx2.AsyncClient(transport=transport, timeout=s.timeout) as http,
            asyncio.TaskGroup() as attempts,
        ):
            try:
                while not stop.is_set():
                    self._changed.clear()
                    free = s.concurrency - len(self._running)
                    claimed = await self._claim(free) if free > 0 else []
                    for due in claimed:
                        task = attempts.create_task(self._attempt(http, due))
                        self._running.add(task)
                        task.add_done_callback(self._done)
                    if claimed and len(claimed) == free:
                        continue  # more may be due: claim again once a slot frees
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), timeout=s.poll)
            finally:
                await self._finish(s.shutdown_grace)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._changed.set()

    async def _finish(self, grace: float) -> None:
        """Attempts under way get `grace` seconds; the rest are cancelled (their leases
        make them due again)."""
        if self._running:
            await asyncio.wait(set(self._running), timeout=grace)
        for task in set(self._running):
            task.cancel()

    async def _claim(self, free: int) -> list[Due]:
        try:
            return await self._deliveries.claim(free, self._settings.lease)
        except _TRANSIENT as e:
            log.warning("could not claim webhook deliveries", error=str(e))
            return []

    async def _attempt(self, http: httpx2.AsyncClient, due: Due) -> None:
        with structlog.contextvars.bound_contextvars(
            tenant_id=due.tenant_id,
            webhook_id=due.subscription_id,
            delivery_id=due.delivery_id,
            attempt=due.attempts,
        ):
            try:
                await self._post(http, due)
            except (*_TRANSIENT, UnsealError) as e:
                log.warning("webhook attempt not recorded", error=str(e))
            except Exception:  # an attempt never takes the dispatcher down; its lease ends
                log.exception("webhook attempt failed unexpectedly")

    async def _post(self, http: httpx2.AsyncClient, due: Due) -> None:
        if due.sealed_secret is None:
            await self._deliveries.failed(due, "the subscription was removed", None, final=True)
            return
        headers = _headers(due, unseal(due.sealed_secret))
        status: int | None = None
        try:
            response = await http.post(due.url, content=due.body, headers=headers)
        except httpx2.InvalidURL as e:  # saved before its form was checked: never deliverable
            await self._deliveries.failed(due, f"the URL is refused: {e}", None, final=True)
            return
        except EgressRefused as e:
            error = str(e)
        except httpx2.HTTPError as e:
            error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        else:
            status = response.status_code
            if 200 <= status < 300:
                await self._deliveries.delivered(due, status)
                log.info("webhook delivered", status=status)
                return
            error = f"the receiver answered {status}"
        state = await self._deliveries.failed(due, error, status)
        log.info("webhook attempt failed", error=error, status=state)


def _headers(due: Due, sealed: dict[str, str]) -> dict[str, str]:
    """A subscription's delivery is signed per Standard Webhooks; a push notification
    carries its config's scheme and credentials as `Authorization`, its token, and the
    delivery's id (`webhook-id`) to deduplicate on."""
    if due.kind != PUSH_KIND:
        secret = sealed.get(SECRET_NAME, "")
        return standard_headers(secret, due.delivery_id, int(time.time()), due.body)
    return {**push_headers(sealed), "webhook-id": due.delivery_id}
