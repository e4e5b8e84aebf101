"""What the workflow routes share: finding a workflow, creating one from a definition,
adding a standalone agent to `@global`, posting to a channel."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Sequence

from litestar.exceptions import (
    ClientException,
    NotFoundException,
    PermissionDeniedException,
    ValidationException,
)

from agency.contracts.commands import (
    CreateWorkflow,
    PostChannelMessage,
    SetSchedule,
    WorkflowMemberSpec,
)
from agency.contracts.events import BlueprintSpec, ScheduleSet, WorkflowLimits
from agency.contracts.ids import MAX_TOKEN_LENGTH, derived_id, new_id
from agency.domain.workflow_members import GLOBAL, global_workflow_id, parse_target, workflow_id
from agency.domain.workflow_state import WorkflowState, fold
from agency.projections import catalog
from agency.services.agents.checks import naming_problems, problems_with_inline, unguarded_names
from agency.services.api.auth import agency_events, agency_owned, agent_types
from agency.services.api.deps import ApiDeps
from agency.services.api.schedule_door import checked_cron, room_for_schedule
from agency.services.api.workflow_door import refuse_members
from agency.services.workflows.definition import Definition, DefinitionError, UnreachableServer

# Creating members waits for the registry; past this the route answers 202.
CREATE_WAIT = 15.0
_TOKEN = rf"[A-Za-z0-9_-]{{1,{MAX_TOKEN_LENGTH}}}"
# A workflow reference: its id (`wf_…`), or `name` / `name:tag`, `@` in front or not.
WORKFLOW_REF = rf"^@?{_TOKEN}(:{_TOKEN})?$"
# An agent of the agency, `@` in front or not.
AGENT_REF = rf"^@?{_TOKEN}$"
_WORKFLOW_REF = re.compile(WORKFLOW_REF)


async def read_state(deps: ApiDeps, tenant: str, wf: str) -> WorkflowState:
    return fold(await deps.bus.store.read(tenant, "workflow", wf), wf)


async def find_workflow(deps: ApiDeps, tenant: str, agency_id: str, ref: str) -> WorkflowState:
    """A workflow by id (`wf_…`) or by `name[:tag]` (an `@` in front is fine); 404 if this
    tenant's agency has none. `@global` exists for every agency of the tenant, even before
    first use; for an agency the tenant does not have it is not found like any other."""
    if not _WORKFLOW_REF.fullmatch(ref):
        raise ValidationException(
            f"{ref[:80]!r} is not a workflow: use its id, @name or @name:tag (letters, "
            f"digits, '-' and '_', at most {MAX_TOKEN_LENGTH} each)"
        )
    if ref.startswith("wf_") and ":" not in ref:
        wf = ref
    else:
        wf = workflow_id(tenant, agency_id, *parse_target(ref))
    state = await read_state(deps, tenant, wf)
    if state.status == "absent" and wf == global_workflow_id(tenant, agency_id):
        await agency_owned(deps, tenant, agency_id)
        return WorkflowState(workflow_id=wf, agency_id=agency_id, name=GLOBAL)
    if state.status == "absent" or state.agency_id != agency_id:
        raise NotFoundException(f"workflow {ref} not found in agency {agency_id}")
    return state


async def find_schedule(deps: ApiDeps, tenant: str, agency_id: str, schedule_id: str) -> None:
    """404 unless the schedule was set in this tenant's agency (removed or not: removing it
    again is the same command)."""
    events = await deps.bus.store.read(tenant, "schedule", schedule_id)
    if not any(isinstance(e.payload, ScheduleSet) and e.payload.agency_id == agency_id
               for e in events):  # fmt: skip
        raise NotFoundException(f"schedule {schedule_id} not found in agency {agency_id}")


async def wait_for(
    deps: ApiDeps,
    tenant: str,
    wf: str,
    check: Callable[[WorkflowState], bool],
    timeout: float,
) -> WorkflowState | None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.01
    while True:
        state = await read_state(deps, tenant, wf)
        if check(state):
            return state
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)


async def create_workflow(
    deps: ApiDeps, tenant: str, agency_id: str, definition: Definition
) -> tuple[str, WorkflowState | None]:
    """Send the create command (and one schedule per trigger); wait for the members."""
    for trigger in definition.triggers:
        checked_cron(deps, trigger.cron)
    if definition.triggers:
        await room_for_schedule(deps, tenant)
    known = agent_types(deps, await agency_events(deps, tenant, agency_id))
    members: list[WorkflowMemberSpec] = []
    for entry in definition.agents:
        if entry.inline is not None:
            members.append(WorkflowMemberSpec(name=entry.name, blueprint=entry.inline))
            continue
        blueprint = known.get(entry.blueprint_name or "")
        if blueprint is None:
            # A well-formed definition naming a blueprint that is not there: not found.
            raise NotFoundException(
                f"agents.{entry.name}: no blueprint {entry.blueprint_name!r} in agency "
                f"{agency_id}; it has {', '.join(sorted(known)) or 'none'}"
            )
        members.append(WorkflowMemberSpec(name=entry.name, blueprint=blueprint))
    refuse_members(deps, definition.name, ((m.name, m.blueprint) for m in members))
    wf = workflow_id(tenant, agency_id, definition.name, definition.tag)
    await _ensure(
        deps, tenant, agency_id, wf, definition.name, definition.tag, members,
        limits=definition.limits, source="definition",
    )  # fmt: skip
    for i, trigger in enumerate(definition.triggers):
        schedule = derived_id("sch_", wf, str(i), trigger.cron, trigger.message)
        await deps.bus.commands.send(
            tenant,
            SetSchedule(
                agency_id=agency_id, schedule_id=schedule,
                name=f"{definition.name}{':' + definition.tag if definition.tag else ''}#{i + 1}",
                cron=trigger.cron, target="workflow", workflow_id=wf, message=trigger.message,
            ),
            idempotency_key=f"trigger:{schedule}",
        )  # fmt: skip
    names = {m.name for m in members}
    state = await wait_for(deps, tenant, wf, lambda s: names <= set(s.members), CREATE_WAIT)
    if state is not None:
        # Readable too: the read models have applied the workflow's events so far (bounded).
        last = await deps.bus.store.last_position(tenant, "workflow", wf)
        partition = deps.bus.layout.partition(wf)
        await deps.progress.wait_passed(
            catalog.NAMES, last.stream_seq, CREATE_WAIT, partition=partition
        )
    return wf, state


async def ensure_global_member(
    deps: ApiDeps, tenant: str, agency_id: str, agent: str
) -> WorkflowState:
    """`@global` with `agent` (a blueprint of the agency) as a member."""
    wf = global_workflow_id(tenant, agency_id)
    state = await read_state(deps, tenant, wf)
    if agent in state.members:
        return state
    known = agent_types(deps, await agency_events(deps, tenant, agency_id))
    if agent not in known:
        raise NotFoundException(
            f"no agent {agent[:80]!r} in agency {agency_id}; it has "
            f"{', '.join(sorted(known)) or 'no blueprints'}"
        )
    members = [WorkflowMemberSpec(name=agent, blueprint=known[agent])]
    await _ensure(deps, tenant, agency_id, wf, GLOBAL, "", members)
    found = await wait_for(deps, tenant, wf, lambda s: agent in s.members, CREATE_WAIT)
    if found is None:
        raise TimeoutError(f"@global did not get member {agent} in time")
    return found


async def adhoc_workflow(
    deps: ApiDeps, tenant: str, agency_id: str, agents: dict[str, BlueprintSpec]
) -> WorkflowState:
    """A workflow of inline agents for one `/run`: named by its agents' definitions."""
    digest = hashlib.sha256(repr(sorted(agents.items())).encode()).hexdigest()[:12]
    wf = workflow_id(tenant, agency_id, "run", digest)
    state = await read_state(deps, tenant, wf)
    if set(agents) <= set(state.members):
        return state
    members = [WorkflowMemberSpec(name=n, blueprint=b) for n, b in agents.items()]
    await _ensure(deps, tenant, agency_id, wf, "run", digest, members)
    found = await wait_for(deps, tenant, wf, lambda s: set(agents) <= set(s.members), CREATE_WAIT)
    if found is None:
        raise TimeoutError("the workflow's members were not created in time")
    return found


async def _ensure(
    deps: ApiDeps,
    tenant: str,
    agency_id: str,
    wf: str,
    name: str,
    tag: str,
    members: Sequence[WorkflowMemberSpec],
    *,
    limits: WorkflowLimits | None = None,
    source: str = "",
) -> None:
    """Create workflow `wf` if it does not exist, and add the `members` it lacks."""
    refuse_members(deps, name, ((m.name, m.blueprint) for m in members))
    command = CreateWorkflow(
        agency_id=agency_id, workflow_id=wf, name=name, tag=tag, members=tuple(members),
        limits=limits or WorkflowLimits(), source=source,
    )  # fmt: skip
    await deps.bus.commands.send(tenant, command, idempotency_key=new_id())


async def post_message(
    deps: ApiDeps,
    tenant: str,
    state: WorkflowState,
    content: str,
    *,
    to: tuple[str, ...] = (),
    sender: str = "user",
) -> str:
    """Post to the channel; 404 for an unknown member, 409 while it has none. Returns the
    message id."""
    if state.status == "absent":
        raise ClientException(
            status_code=409,
            detail=f"{state.display_name} has no members yet: address an agent of the agency",
        )
    unknown = [n[:80] for n in to if n not in state.members]
    if unknown:
        raise NotFoundException(
            f"no member {', '.join('@' + n for n in unknown)} in {state.display_name}; "
            f"members: {', '.join('@' + m for m in sorted(state.members)) or 'none'}"
        )
    if not content.strip():
        raise ValidationException("the message must not be empty")
    message_id = "msg_" + new_id()
    await deps.bus.commands.send(
        tenant,
        PostChannelMessage(
            agency_id=state.agency_id,
            workflow_id=state.workflow_id,
            message_id=message_id,
            sender=sender,
            content=content,
            to=to,
        ),
        idempotency_key=message_id,
    )
    return message_id


def check_members(deps: ApiDeps, definition: Definition) -> list[str]:
    """400 naming each tag or hook of an inline member (or of a subagent blueprint one
    defines inline) that the agent system does not have; else the warnings: each
    `hitl.tools` name there that is none of its blueprint's tools (it guards nothing)."""
    inline = [(e.name, e.inline) for e in definition.agents if e.inline is not None]
    problems = [
        problem
        for name, spec in inline
        for problem in problems_with_inline(deps.system, spec, f"agents.{name}.", naming_problems)
    ]
    if problems:
        raise ValidationException(f"invalid workflow definition: {'; '.join(problems)}")
    return [
        warning
        for name, spec in inline
        for warning in problems_with_inline(deps.system, spec, f"agents.{name}.", unguarded_names)
    ]


def definition_error(e: DefinitionError) -> ClientException:
    """400 naming what is wrong, or 403 for a member's server the egress rule forbids."""
    if isinstance(e, UnreachableServer):
        return PermissionDeniedException(f"workflow definition: {e}")
    return ValidationException(f"invalid workflow definition: {e}")
