"""What route handlers receive: the caller (`principal`) and the app's resources (`deps`).

The app registers two litestar dependencies under these names; handlers declare
`principal: Principal` and/or `deps: ApiDeps` parameters to get them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import asyncpg

from agency.contracts.opened import OPENED
from agency.infra.jetstream.connection import Bus
from agency.infra.nats_auth import CredentialIssuer
from agency.services.agents.system import AgentSystem
from agency.services.api.cors import CorsSettings
from agency.services.api.forwarded import TrustedProxies
from agency.services.api.keys import KeyCache
from agency.services.api.known import KnownResources
from agency.services.api.langgraph.views import GraphViews
from agency.services.api.limits import InvokeLimiter
from agency.services.api.memory_relief import MemoryRelief
from agency.services.api.progress import ProjectionProgress
from agency.services.api.runstatus import KeptStatuses
from agency.services.api.thread_create import PendingListings
from agency.services.llm.catalog import ProviderCatalog
from agency.services.observability.metrics import Metrics
from agency.services.tenancy.admission import Admission
from agency.services.tenancy.door_limits import DoorLimits
from agency.services.tenancy.fairness import ScheduleLimits
from agency.services.tenancy.spend_ledger import SpendLedger
from agency.services.threads.caches import ThreadCache
from agency.services.threads.retention_policy import RetentionSettings

# Threads the API keeps folded (the least recently used go first).
THREADS_KEPT = 2_000


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a tenant (by API key or the single-tenant secret) or the admin."""

    tenant_id: str
    admin: bool = False
    # The API key the caller authenticated with (None for the admin and `X-SECRET`).
    key_id: str | None = None


@dataclass(frozen=True, slots=True)
class ApiSettings:
    admin_secret: str | None = None
    # The seed's `X-SECRET` set-up: one shared secret, one tenant.
    shared_secret: str | None = None
    shared_secret_tenant: str | None = None
    max_body_bytes: int = 1024 * 1024
    # How long a create waits for its read model, so the caller can read what it wrote.
    read_your_writes_timeout: float = 5.0
    # How long an invoke waits for the runtime to take the run up, to answer its status.
    invoke_status_timeout: float = 2.0
    # How long a read of one thread waits for the read models to have applied its log as
    # far as it goes (`readback.caught_up`); past it the read answers what they hold.
    read_lag_timeout: float = 1.0
    # The browser origins that may call the API (`AGENCY_CORS_ORIGINS`, `services/api/cors.py`).
    cors: CorsSettings = field(default_factory=CorsSettings)
    # The reverse proxies whose `X-Forwarded-*` are believed (`AGENCY_TRUSTED_PROXIES`,
    # `services/api/forwarded.py`).
    trusted_proxies: TrustedProxies = field(default_factory=TrustedProxies)
    # How often a schedule may fire, how many a tenant may have (`AGENCY_SCHEDULE_*`,
    # `AGENCY_TENANT_*SCHEDULE*`); refused at the door beyond them.
    schedules: ScheduleLimits = field(default_factory=ScheduleLimits.from_env)
    # The operator's retention default and maximum (`AGENCY_RETENTION_*`,
    # `services/threads/retention_policy.py`): tenants and agencies set theirs within them.
    retention: RetentionSettings = field(default_factory=RetentionSettings.from_env)


@dataclass(frozen=True, slots=True)
class ApiDeps:
    pool: asyncpg.Pool
    bus: Bus
    system: AgentSystem
    settings: ApiSettings
    # The state of each service supervised beside the API (`agency up`), for `/readyz`.
    services: Callable[[], Mapping[str, str]] | None = None
    keys: KeyCache = field(default_factory=KeyCache)
    metrics: Metrics = field(default_factory=Metrics)
    # Issues tenants' NATS credentials where Agency manages the server's users (embedded).
    nats_credentials: CredentialIssuer | None = None
    # Per-tenant invoke limits (`AGENCY_TENANT_*`); 429 with Retry-After beyond them.
    limiter: InvokeLimiter = field(default_factory=InvokeLimiter)
    # Each tenant's share of this process under overload (`AGENCY_ADMISSION_*`): 429 with
    # Retry-After beyond it, before the request is read.
    admission: Admission = field(default_factory=Admission)
    # Memory taken during an overload, given back once it has passed.
    relief: MemoryRelief = field(init=False)
    # A blueprint's prompt and an invoke's messages, bounded (`AGENCY_MAX_*`): 400 beyond.
    door: DoorLimits = field(default_factory=DoorLimits.from_env)
    # The model providers the runtime may call: a blueprint naming another is refused.
    # The default is offline (every known provider, the fake model standing in).
    models: ProviderCatalog = field(default_factory=ProviderCatalog)
    # How far each projection has applied the log, by notification while the app runs.
    progress: ProjectionProgress = field(init=False)
    # Threads folded from the log, kept by position: a command's checks and a state's
    # middleware parts read only the events since the last look at the thread.
    threads: ThreadCache = field(init=False)
    # The LangGraph views of the threads last read, kept folded the same way.
    graph_views: GraphViews = field(init=False)
    # Each thread's run statuses as its last invoke's wait folded them.
    run_statuses: KeptStatuses = field(default_factory=KeptStatuses)
    # Per tenant, the last thread created here that the read models may not list yet.
    listings: PendingListings = field(init=False)
    # Agencies and agencies' blueprints found to exist, not read again on a create.
    known: KnownResources = field(default_factory=KnownResources)
    # What each tenant and agency spent this period, from the log, and their budgets.
    spend: SpendLedger = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "graph_views", GraphViews(self.bus.store))
        object.__setattr__(self, "progress", ProjectionProgress(self.pool))
        object.__setattr__(self, "listings", PendingListings(self.progress))
        object.__setattr__(self, "threads", ThreadCache(self.bus.store, capacity=THREADS_KEPT))
        object.__setattr__(self, "spend", SpendLedger(self.bus))
        # After an overload, what the flood left folded goes with the garbage.
        shed = (self.threads.shed_resting, self.graph_views.shed, OPENED.shed)
        object.__setattr__(self, "relief", MemoryRelief(self.admission, shed=shed))
