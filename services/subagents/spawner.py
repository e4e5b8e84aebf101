"""Spawning and messaging children: a `subagent.requested` turned into a child thread, its
link on the parent, its first run and its timeout; a `subagent.messaged` into another run of
a resumable child; a child's `thread.created` whose first run was never asked for (a crash
between creating and invoking it) seen through (`adopt`).

Each step is idempotent, with a deterministic id and key, so running a spawn again after a
crash anywhere in it creates nothing twice.
"""

from __future__ import annotations

from datetime import timedelta

import structlog

from agency.contracts.commands import CreateThread, InvokeThread, SubagentDeadline
from agency.contracts.envelope import utc_now
from agency.contracts.events import (
    ChatMessage,
    ParentRef,
    RequestAccepted,
    RequestRejected,
    SubagentMessaged,
    SubagentRequested,
    SubagentSpawned,
    ThreadCreated,
)
from agency.domain.child_naming import (
    child_run_id,
    child_thread_id,
    child_token,
    message_run_id,
    thread_name,
)
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.services.agents.system import AgentSystem
from agency.services.decide import decide_and_append
from agency.services.subagents.history import (
    Origin,
    files_of,
    has_link,
    spawn_moot,
    with_attachments,
)
from agency.services.subagents.reads import read_finding
from agency.services.subagents.reports import Reports
from agency.services.subagents.spawns import Spawns
from agency.services.subagents.tree_gate import TreeGate
from agency.services.threads.caches import BlueprintCache

log = structlog.get_logger(__name__)

# How long a child's `thread.created` waits for its spawn under way here to be over.
SPAWN_WAIT = 30.0


def _requested(history: list[RecordedEvent], call_id: str) -> RecordedEvent | None:
    """The parent's request for the child of its call `call_id`."""
    for e in history:
        if isinstance(e.payload, SubagentRequested) and e.payload.tool_call_id == call_id:
            return e
    return None


def event_context(event: RecordedEvent) -> EventContext:
    """The context of what is recorded in answer to `event`: its agency, thread, correlation."""
    env = event.envelope
    return EventContext(
        agency_id=env.agency_id, thread_id=env.aggregate_id, correlation_id=env.correlation_id
    )


class Spawner:
    """Creates, links and starts children; a refused or unknown one is reported (`Reports`)."""

    def __init__(
        self,
        bus: Bus,
        system: AgentSystem,
        *,
        blueprints: BlueprintCache,
        gate: TreeGate,
        spawns: Spawns,
        reports: Reports,
    ) -> None:
        self._bus = bus
        self._system = system
        self.blueprints = blueprints
        self.gate = gate
        self.spawns = spawns
        self._reports = reports

    async def spawn(self, event: RecordedEvent, request: SubagentRequested) -> None:
        env = event.envelope
        tenant, parent = env.tenant_id, env.aggregate_id
        agency = env.agency_id or ""
        context = event_context(event)
        child = child_thread_id(tenant, parent, request.tool_call_id)
        history = await self._bus.store.read(tenant, "thread", parent)
        if spawn_moot(history, request, child):
            log.info("subagent request of an ended run ignored", child_thread_id=child)
            return
        dynamic = await self.blueprints.dynamic(tenant, agency)
        if (
            request.blueprint is None
            and request.subagent_type not in dynamic
            and request.subagent_type not in self._system.blueprints
        ):
            await self._reports.complete(
                tenant, parent, Origin(request.run_id, request.tool_call_id, request.blocking),
                child, "error", f"no blueprint named {request.subagent_type!r} in this agency",
                context, key=f"report:{child}:unknown",
            )  # fmt: skip
            return
        refused = await self.gate.refusal(event, request, history, child)
        if refused is not None:
            outcome, why = refused
            log.info("subagent refused by its tree", child_thread_id=child, reason=why)
            await self._reports.complete(
                tenant, parent, Origin(request.run_id, request.tool_call_id, request.blocking),
                child, outcome, why, context, key=f"report:{child}:tree",
            )  # fmt: skip
            return
        token = child_token(tenant, parent, request.tool_call_id)
        self.spawns.begin(child)
        invoked = False
        try:
            invoked = await self._create_and_finish(event, request, child, token)
        finally:
            self.spawns.end(child, invoked=invoked)

    async def _create_and_finish(
        self, event: RecordedEvent, request: SubagentRequested, child: str, token: str
    ) -> bool:
        """Create the child and see its spawn through; whether its first invoke went out."""
        env = event.envelope
        tenant, parent, agency = env.tenant_id, env.aggregate_id, env.agency_id or ""
        await self._bus.commands.send(
            tenant,
            CreateThread(
                agency_id=agency,
                thread_id=child,
                agent_type=request.subagent_type,
                parent=ParentRef(
                    thread_id=parent,
                    token=token,
                    tool_call_id=request.tool_call_id,
                    communication=request.parent_communication,
                ),
                sealed_env=request.sealed_env,
                blueprint=request.blueprint,
            ),
            idempotency_key=f"spawn:{child}",
        )
        return await self._finish_spawn(event, request, child, invoke_key=f"spawn-invoke:{child}")

    async def adopt(self, created: RecordedEvent, parent: str, call_id: str) -> None:
        """A child thread exists: make sure its first run was asked for."""
        tenant, child = created.envelope.tenant_id, created.envelope.aggregate_id
        if child != child_thread_id(tenant, parent, call_id):
            return  # not a `task` child (a fork's copy, say): not ours to start
        root, agency = created.envelope.correlation_id or parent, created.envelope.agency_id or ""
        if await self.gate.trees.on_created(self._bus.commands, tenant, agency, root, child):
            return  # its tree was stopped while it was being spawned: ended as it appears
        if await self.spawns.invoked(child, SPAWN_WAIT):
            return  # the usual case: its spawn here, under way as it was created, invoked it
        history, requested = await read_finding(
            self._bus.store, tenant, parent, lambda h: _requested(h, call_id)
        )
        if requested is None or not isinstance(requested.payload, SubagentRequested):
            return
        request = requested.payload
        if spawn_moot(history, request, child):
            return
        created_payload = created.payload
        if isinstance(created_payload, ThreadCreated) and "forkedFrom" in created_payload.request:
            return  # a fork's copy of a child: its history came with it
        if await self._has_request(tenant, child):
            return  # invoked (by a spawn in another process of this service, say)
        # A spawn that went no further than the child's creation, or one under way in another
        # process (the runtime then takes one of the two invokes): recovery, not a failure.
        log.info("child created but not invoked; starting it", child_thread_id=child)
        # A key of its own: the first invoke's key may still be in the broker's duplicate
        # window although that command was dead-lettered. The runtime accepts one request
        # per run id, so both arriving start one run.
        await self._finish_spawn(requested, request, child, invoke_key=f"adopt-invoke:{child}")

    async def _finish_spawn(
        self, event: RecordedEvent, request: SubagentRequested, child: str, *, invoke_key: str
    ) -> bool:
        """Link the child to the parent, start its first run, arm its timeout: each step
        idempotent, so running this again after a crash anywhere in it is harmless. True:
        the first invoke went out (or the child had one already)."""
        env = event.envelope
        tenant, parent = env.tenant_id, env.aggregate_id
        agency = env.agency_id or ""
        context = event_context(event)
        token = child_token(tenant, parent, request.tool_call_id)
        spawned = await self._registry_entry(tenant, agency, request, child, token)
        await decide_and_append(
            self._bus.store, tenant, "thread", parent,
            lambda history: () if has_link(history, child) else (spawned,),
            context=context,
            idempotency_key=f"spawned:{child}",
        )  # fmt: skip
        # Started already (by another path of this spawn, or a fork copied its run): no
        # second invoke, whatever key it would carry.
        if not await self._has_request(tenant, child):
            await self._invoke_first_run(tenant, agency, parent, request, child, invoke_key)
        if request.timeout_ms:
            origin = Origin(request.run_id, request.tool_call_id, request.blocking)
            await self._arm_deadline(tenant, context, origin, child, request.timeout_ms)
        log.info("subagent spawned", child_thread_id=child, subagent_type=request.subagent_type)
        return True

    async def _registry_entry(
        self, tenant: str, agency: str, request: SubagentRequested, child: str, token: str
    ) -> SubagentSpawned:
        """The link and the child's entry in the parent's registry: the call's values, the
        subagent entry's configuration, and the child blueprint's description as the title
        when the call gave none."""
        blueprint = request.blueprint
        if blueprint is None:
            dynamic = await self.blueprints.dynamic(tenant, agency)
            blueprint = dynamic.get(request.subagent_type) or self._system.blueprints.get(
                request.subagent_type
            )
        name = request.name or request.subagent_type
        return SubagentSpawned(
            run_id=request.run_id,
            tool_call_id=request.tool_call_id,
            child_thread_id=child,
            token=token,
            subagent_type=request.subagent_type,
            name=name,
            title=request.title or (blueprint.description if blueprint else "") or None,
            description=request.entry_description or request.description,
            resumable=request.resumable,
            blocking=request.blocking,
            thread_name=thread_name(request.subagent_type, request.name),
            spawn_group_id=request.spawn_group_id,
            parent_communication=request.parent_communication,
        )

    async def _invoke_first_run(
        self,
        tenant: str,
        agency: str,
        parent: str,
        request: SubagentRequested,
        child: str,
        invoke_key: str,
    ) -> None:
        files = await self._attached(tenant, parent, request.attachments)
        await self._bus.commands.send(
            tenant,
            InvokeThread(
                agency_id=agency,
                thread_id=child,
                run_id=child_run_id(child),
                messages=(
                    ChatMessage(role="user", content=with_attachments(request.description, files)),
                ),
                files=files,
            ),
            idempotency_key=invoke_key,
        )

    async def _has_request(self, tenant: str, child: str) -> bool:
        history = await self._bus.store.read(tenant, "thread", child)
        return any(isinstance(e.payload, RequestAccepted | RequestRejected) for e in history)

    async def message(self, event: RecordedEvent, messaged: SubagentMessaged) -> None:
        env = event.envelope
        tenant, parent, child = env.tenant_id, env.aggregate_id, messaged.child_thread_id
        files = await self._attached(tenant, parent, messaged.attachments)
        await self._bus.commands.send(
            tenant,
            InvokeThread(
                agency_id=env.agency_id or "",
                thread_id=child,
                run_id=message_run_id(child, messaged.tool_call_id),
                messages=(
                    ChatMessage(role="user", content=with_attachments(messaged.message, files)),
                ),
                files=files,
            ),
            idempotency_key=f"message:{child}:{messaged.tool_call_id}",
        )

    async def _attached(self, tenant: str, parent: str, paths: tuple[str, ...]) -> dict[str, str]:
        if not paths:
            return {}
        files = files_of(await self._bus.store.read(tenant, "thread", parent))
        # The child gets each file at the same path: its filesystem is its own.
        return {p: files[p] for p in paths if p in files}

    async def _arm_deadline(
        self, tenant: str, context: EventContext, origin: Origin, child: str, timeout_ms: int
    ) -> None:
        """The timeout is a command the broker redelivers until it is due: it survives a
        restart of every coordinator, so a parent never waits past it."""
        deadline = utc_now() + timedelta(milliseconds=timeout_ms)
        await self._bus.commands.send(
            tenant,
            SubagentDeadline(
                agency_id=context.agency_id or "",
                parent_thread_id=context.thread_id or "",
                run_id=origin.run_id,
                tool_call_id=origin.tool_call_id,
                child_thread_id=child,
                deadline=deadline,
                timeout_ms=timeout_ms,
            ),
            idempotency_key=f"deadline:{child}",
        )
