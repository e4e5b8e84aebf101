"""How a consumer worker (`worker.py`) paces itself and retries its own NATS operations:
the keywords every worker takes (`WorkerTuning`) and the retry policies (`WorkerRetry`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypedDict

from agency.infra.outage import OutageWait
from agency.infra.retry import RetryPolicy

# ack, nak, term, in_progress and the dead-letter publish.
SETTLE_RETRY = RetryPolicy(attempts=6, timeout=15.0, wait_initial=0.1, wait_max=2.0)
# One round of creating and binding the durable; rounds repeat until `stop`.
SUBSCRIBE_RETRY = RetryPolicy(
    attempts=8, timeout=60.0, wait_initial=0.5, wait_max=5.0, wait_jitter=0.5
)
# The owner's hook run before a message is dead-lettered.
HOOK_RETRY = RetryPolicy(attempts=5, timeout=30.0, wait_initial=0.2, wait_max=3.0)


@dataclass(frozen=True, slots=True)
class WorkerRetry:
    """The retry policies of a worker's own NATS operations (and of its dead-letter hook),
    and how long a handler waits out an outage before its delivery counts as failed."""

    settle: RetryPolicy = SETTLE_RETRY
    subscribe: RetryPolicy = SUBSCRIBE_RETRY
    hook: RetryPolicy = HOOK_RETRY
    outage: OutageWait = field(default_factory=OutageWait.from_env)


class TenantShares(Protocol):
    """Each tenant's share of the messages a worker holds (`services/tenancy/`): `hold`
    counts one of the tenant's and answers None, or, for a `refusable` message of a tenant
    at its share of a full worker, why not (counting nothing); `release` gives one back."""

    def hold(self, tenant: str, now: float, *, refusable: bool) -> str | None: ...

    def release(self, tenant: str, now: float) -> None: ...


class WorkerTuning(TypedDict, total=False):
    """How a worker paces itself, the same keywords for every worker (defaults after `=`).

    `shutdown_grace` (= 5.0): seconds the handlers in flight get once `stop` is set.
    `poll_interval` (= 1.0): the longest a fetch waits, so how soon `stop` is seen.
    `retry` (= `WorkerRetry()`): how failed fetches, subscribes and settles are retried.
    `held` (= `concurrency`): messages fetched and not yet settled, at least `concurrency`.
    `tenant_running`, `tenant_held` (= 0, no bound): one tenant's share of both.
    `shares` (= None): a tenant's share of what is held, by weight, once it is full; a
    message its tenant sent through the gateway beyond it is dead-lettered at once.
    """

    shutdown_grace: float
    poll_interval: float
    retry: WorkerRetry | None
    held: int | None
    tenant_running: int
    tenant_held: int
    shares: TenantShares | None
