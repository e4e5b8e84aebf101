"""The runtime service: runtime commands in, thread loops driven by events.

- Commands (`invoke`, `approve`, `cancel`, `terminate`) are decided against the thread's
  folded state and appended; they never wait for a model.
- Trigger events (`request.accepted`, `hitl.resume`, tool results, `run.canceled`) are
  consumed from a durable consumer shared by every runtime worker; each drives its thread
  until it waits again, and is acknowledged only then. A worker killed mid-run leaves its
  trigger unacknowledged, so another (or the restarted one) picks the run up from the log.
- Every worker also listens to `run.canceled` on plain NATS to abort a model call it has in
  flight for that thread.
- Every worker answers re-execution requests (`tenant.<t>.req.runtime.reexecute`): its
  current code over a recorded thread, in memory (`services/runtime/replay/`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog
from nats.js.errors import NotFoundError

from agency.contracts.commands import (
    ApproveToolCalls,
    CancelRun,
    CommandEnvelope,
    DelayRun,
    InvokeThread,
    TerminateThread,
    UpdateThreadState,
    WatchRun,
)
from agency.contracts.envelope import utc_now
from agency.contracts.errors import CommandRejected
from agency.contracts.events import AnyEvent, HitlResume, RequestAccepted
from agency.contracts.ids import validate_token
from agency.contracts.partitions import any_tenant_subject
from agency.contracts.subjects import tenant_of
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.commandbus import Defer, Delivery
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import RUNTIME_TRIGGERS
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.eventworker import EventWorker, PermanentFailure
from agency.infra.jetstream.leases import Leases
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.system import AgentSystem
from agency.services.decide import CONFLICT_ATTEMPTS, conflict_pause
from agency.services.llm.provider import Provider
from agency.services.llm.router import ProviderRouter
from agency.services.llm.tenant_models import StoreTenantModels
from agency.services.runtime import commands, watchdog
from agency.services.runtime.appends import thread_context
from agency.services.runtime.checkpoint import with_checkpoint
from agency.services.runtime.decision import Decision
from agency.services.runtime.drives import BUSY_WAIT, Drives, StartState
from agency.services.runtime.local_tools import is_own_result
from agency.services.runtime.loop import ThreadDriver, UnknownThread
from agency.services.runtime.spend_guard import SpendGuard
from agency.services.runtime.tool_sources import McpTools, RemoteAgentTools
from agency.services.runtime.tree_stops import stop_tree
from agency.services.runtime.watches import RunWatches
from agency.services.tenancy import fairness
from agency.services.tenancy.admission import AdmissionSettings, RunShares
from agency.services.tenancy.door_limits import DoorLimits
from agency.services.tenancy.spend_ledger import SpendLedger
from agency.services.threads.caches import BlueprintCache, ThreadCache

log = structlog.get_logger(__name__)

TRIGGER_CONSUMER = RUNTIME_TRIGGERS.name
# A command for a thread not created yet: the deliveries handed back without a word, each
# `UNKNOWN_THREAD_DELAY` times its attempt later (0.2 + 0.4 + 0.6 s in all).
UNKNOWN_THREAD_QUIET_ATTEMPTS = 4
UNKNOWN_THREAD_DELAY = 0.2


class RuntimeService:
    def __init__(
        self,
        bus: Bus,
        system: AgentSystem,
        provider: Provider,
        *,
        concurrency: int = 256,
        ack_wait: float = 30.0,
        max_deliver: int = 10,
        consumer: str = TRIGGER_CONSUMER,
        leases: Leases,
        busy_wait: float = BUSY_WAIT,
        watch: watchdog.WatchSettings | None = None,
        mcp: McpTools | None = None,
        remote_agents: RemoteAgentTools | None = None,
    ) -> None:
        self._bus = bus
        self._consumer = consumer
        self._threads = ThreadCache(bus.store)
        self.blueprints = BlueprintCache(bus.store)
        if isinstance(provider, ProviderRouter):
            # Tenants' own provider settings, read from their logs.
            provider.use_tenant_models(StoreTenantModels(bus.store))
        # Every model call asks the tenant's and its agency's spend budgets first.
        self.spend = SpendLedger(bus)
        provider = SpendGuard(provider, self.spend)
        self.driver = ThreadDriver(
            bus.store, system, provider, self._threads, self.blueprints, mcp=mcp,
            remote_agents=remote_agents,
        )  # fmt: skip
        watch = watch or watchdog.WatchSettings.from_env()
        self.drives = Drives(
            self.driver, self._threads, leases, end_after=watch.end_after, busy_wait=busy_wait
        )
        self.watches = RunWatches(
            bus,
            self._threads,
            leases,
            self.driver,
            watch,
            lambda tenant, thread_id: self.drives.soon(tenant, thread_id),
        )
        self._concurrency = concurrency
        self._ack_wait = ack_wait
        self._max_deliver = max_deliver
        # Per-tenant fairness (services/tenancy/fairness.py): limits, and the load they need.
        self.fairness = fairness.FairnessLimits.from_env()
        self.door = DoorLimits.from_env()
        self.load = fairness.TenantLoad(shares=RunShares(AdmissionSettings.from_env()))

    def attach(self, background: asyncio.TaskGroup) -> None:
        """The task group that the drives this worker starts itself run in (and end with)."""
        self.drives.attach(background)

    # --- commands -----------------------------------------------------------------

    async def handle_command(self, envelope: CommandEnvelope, delivery: Delivery) -> None:
        await self._apply_command(envelope, delivery)
        payload = envelope.payload
        if isinstance(payload, CancelRun | TerminateThread):
            # The thread's part of its subagent tree stops with it (`tree_stops.py`).
            await stop_tree(self.driver.trees, self._threads, self._bus.commands, envelope, payload)

    async def _apply_command(self, envelope: CommandEnvelope, delivery: Delivery) -> None:
        payload = envelope.payload
        match payload:
            case WatchRun():
                await self.watches.handle(envelope.tenant_id, payload, delivery)
                return
            case InvokeThread(not_before=due) if due is not None and due > utc_now():
                # Not yet: the broker holds it until it is due (`runtime.delay` put the run
                # on the log as pending meanwhile).
                raise Defer((due - utc_now()).total_seconds())
            case (
                InvokeThread()
                | DelayRun()
                | ApproveToolCalls()
                | CancelRun()
                | TerminateThread()
                | UpdateThreadState()
            ):
                thread_id = payload.thread_id
            case other:
                raise CommandRejected(
                    "wrong_service", f"{type(other).__name__} is not a runtime command"
                )
        tenant = envelope.tenant_id
        from_leader = False
        # A thread this process holds (it just parked the run, say) is decided on as held,
        # without reading it first: what it appends expects the held position, so a thread
        # that moved meanwhile is a conflict, and read then. Only an append is trusted from
        # it: a refusal or a decision to do nothing is made again on the log's state.
        held = self._threads.cached(tenant, thread_id)
        driven = False
        for attempt in range(CONFLICT_ATTEMPTS):
            state = held or await self._threads.load(tenant, thread_id, from_leader=from_leader)
            if not state.exists:
                await self._refuse_if_elsewhere(tenant, thread_id)
                # The create command may not be applied yet (a subagent's first invoke is
                # sent right behind its create): handed back quietly at first, then retried
                # with backoff (logged), then dead-lettered as exhausted.
                if delivery.attempt < UNKNOWN_THREAD_QUIET_ATTEMPTS:
                    raise Defer(UNKNOWN_THREAD_DELAY * delivery.attempt)
                raise UnknownThread(tenant, thread_id)
            if state.agency_id != payload.agency_id:
                raise CommandRejected(
                    "unknown_thread", f"thread {thread_id} is not in agency {payload.agency_id}"
                )
            try:
                events = commands.decide(
                    state,
                    payload,
                    envelope.idempotency_key,
                    load=self.load,
                    limits=self.fairness,
                    door=self.door,
                )
            except CommandRejected:
                if held is not None:
                    held = None
                    continue
                if from_leader:
                    raise
                # Refused for good only on what the stream's leader says: a replica that is
                # catching up may not have the event that makes the command valid yet.
                from_leader = True
                continue
            if held is not None and not events:
                held = None
                continue
            if not driven and self._drives_decision(tenant, state, payload, events):
                driven = True
                # Stored by the drive it starts, with what follows from it (`decision.py`).
                decision = Decision(
                    events, envelope.command_id, envelope.idempotency_key, decided_at=state.position
                )
                checked: asyncio.Future[ThreadState] | None = None
                if held is not None:
                    # The drive asks the model before its append lands: it goes on from the
                    # log's state (one direct get when nothing is new), read while it takes
                    # the thread's lease, and stores the decision only if the held state was
                    # not behind, which would cost a model call for nothing.
                    held = None
                    checked = asyncio.ensure_future(self._threads.load(tenant, thread_id))
                stored = await self._store_by_driving(
                    tenant, state, envelope, payload, decision, checked
                )
                if stored:
                    return
                if decision.stale:
                    driven = False  # the log moved past the held state: decided again on it
                elif decision.leased_elsewhere:
                    await self.drives.until_moved_or_free(tenant, state)
                continue  # not stored: decided again on the log's state, and stored alone
            # Counted for the tenant's fairness in the step that decided it (no await since):
            # concurrent invokes of one tenant never all take its last free slot.
            accepted = [e.run_id for e in events if isinstance(e, RequestAccepted)]
            for run_id in accepted:
                self.load.reserve(tenant, run_id)
            stored = False
            # The drive starts now: it takes the thread's lease while the decision is being
            # stored, and goes on from the state the append leaves (None: load it).
            landed: StartState = asyncio.get_running_loop().create_future()
            if events:
                self.drives.soon(tenant, thread_id, landed)
            try:
                # Watches are sent alongside the append, and the command is acknowledged only
                # once both are done: a failure of either redelivers it, which sends the same
                # watches again (deduplicated by the broker). No accepted run goes unwatched.
                arming = asyncio.ensure_future(
                    self.watches.send_all(tenant, self.watches.arming(envelope, payload, state))
                )
                try:
                    if events:
                        result = await self._bus.store.append(
                            tenant,
                            "thread",
                            thread_id,
                            with_checkpoint(state, events),
                            expected=state.position,
                            context=thread_context(state, envelope.command_id),
                            idempotency_key=envelope.idempotency_key,
                        )
                        stored = True
                        if not result.duplicate:
                            landed.set_result(self._threads.advance(state, result.events))
                finally:
                    if not landed.done():
                        landed.set_result(None)
                    await arming
                if not events:
                    return
            except ConcurrencyError:
                if held is not None:
                    held = None  # the thread moved since this process held it: read it
                    continue
                # A busy thread (a streaming model call appends every 50 ms) can win a few
                # times in a row: back off a little, with jitter, and decide again.
                await asyncio.sleep(conflict_pause(attempt))
                continue
            finally:
                self._reserved(tenant, accepted, stored=stored)
            return
        raise RuntimeError(f"thread {thread_id}: too many concurrent writers")

    def _reserved(self, tenant: str, run_ids: Sequence[str], *, stored: bool) -> None:
        """Runs reserved for the tenant's fairness while their acceptance was stored: admitted
        when it was (the log says so a moment later too); released when it was not (a
        conflict decides again, a failure is retried)."""
        for run_id in run_ids:
            if stored:
                self.load.admitted(tenant, run_id)
            else:
                self.load.release(tenant, run_id)

    def _drives_decision(
        self,
        tenant: str,
        state: ThreadState,
        payload: commands.ThreadCommand,
        events: Sequence[AnyEvent],
    ) -> bool:
        """Whether the decision is stored by the drive it starts: an approval, or a request
        that starts a run on an idle thread; for a thread this process is not driving
        already, of an agent the loop drives (a code agent's handler decides on the log's
        state)."""
        starts = isinstance(payload, InvokeThread) and state.active_run is None
        return (
            (isinstance(payload, ApproveToolCalls) or starts)
            and any(isinstance(e, RequestAccepted | HitlResume) for e in events)
            and self.drives.can_start(tenant, state.thread_id)
            and self.driver.system.code_agent_for(state.agent_type) is None
        )

    async def _store_by_driving(
        self,
        tenant: str,
        state: ThreadState,
        envelope: CommandEnvelope,
        payload: commands.ThreadCommand,
        decision: Decision,
        checked: asyncio.Future[ThreadState] | None = None,
    ) -> bool:
        """Start the drive that stores the decision with its first append; True once it is
        stored, False when it was not (the caller stores it alone). Watches are sent
        alongside, and runs counted for fairness, as for any decision. `checked`: the log's
        state being read, which the drive checks the decision against
        (`Drives.store_decision`)."""
        accepted = [e.run_id for e in decision.events if isinstance(e, RequestAccepted)]
        for run_id in accepted:
            self.load.reserve(tenant, run_id)
        arming = asyncio.ensure_future(
            self.watches.send_all(tenant, self.watches.arming(envelope, payload, state))
        )
        stored = False
        try:
            self.drives.store_decision(tenant, state, decision, checked)
            stored = await decision.stored is not None
            return stored
        finally:
            self._reserved(tenant, accepted, stored=stored)
            await arming

    # --- triggers -----------------------------------------------------------------

    async def run_triggers(self, stop: asyncio.Event) -> None:
        worker = EventWorker(
            self._bus,
            RUNTIME_TRIGGERS,
            self._on_trigger,
            durable=self._consumer,
            concurrency=self._concurrency,
            ack_wait=self._ack_wait,
            max_deliver=self._max_deliver,
            on_dead_letter=self._on_trigger_dead_letter,
        )
        await worker.run(stop)

    async def _on_trigger_dead_letter(self, event: RecordedEvent, reason: str, detail: str) -> None:
        """A trigger that could not be handled however often it was delivered: its run
        ends with `run.error` rather than stay running with nobody to drive it."""
        env = event.envelope
        if reason == "unknown_thread" or env.run_id is None:
            return
        await self.driver.end_run(
            env.tenant_id,
            env.aggregate_id,
            "trigger_exhausted",
            f"the run could not be driven after repeated attempts ({reason}): {detail}",
            run_id=env.run_id,
        )

    async def _refuse_if_elsewhere(self, tenant: str, thread_id: str) -> None:
        """A command naming a thread another tenant created is refused at once (its create
        cannot be in flight for this tenant: thread ids are unique), never retried."""
        validate_token("thread id", thread_id)
        store = self._bus.store
        subject = any_tenant_subject(store.layout, "thread", thread_id)
        try:
            found = await self._bus.js.get_msg(
                store.stream_of(thread_id), seq=1, subject=subject, next=True
            )
        except NotFoundError:
            return
        if found.subject and tenant_of(found.subject) != tenant:
            raise CommandRejected(
                "unknown_thread", f"thread {thread_id} is not a thread of tenant {tenant}"
            )

    async def _on_trigger(self, event: RecordedEvent) -> None:
        """Any trigger means: drive its thread until it waits again; but for a tool result
        the runtime wrote itself, the drive that appended it went on from there."""
        env = event.envelope
        if is_own_result(event):
            return
        try:
            await self.drives.when_free(env.tenant_id, env.aggregate_id, event.stream_seq)
        except UnknownThread as e:
            raise PermanentFailure("unknown_thread", str(e)) from e
