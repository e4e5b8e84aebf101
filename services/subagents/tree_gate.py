"""The coordinator's look at a spawn's tree before it creates the child.

The runtime admitted the spawn into its tree as it decided it (`runtime/tree_admission.py`);
a spawn that came another way (held back for variables, then provided) is admitted here.
Either way, a stop of the tree recorded after the admission means the spawn was under way
when its tree was stopped: the child is not created.
"""

from __future__ import annotations

from agency.contracts.events import SubagentRequested, ThreadCreated, TreeLimits
from agency.contracts.events.subagent import ChildOutcome
from agency.contracts.records import EventContext
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.system import AgentSystem
from agency.services.threads.agent_trees import TREE_CANCELED, TREE_TERMINATED, AgentTrees
from agency.services.threads.caches import BlueprintCache


class TreeGate:
    def __init__(self, trees: AgentTrees, blueprints: BlueprintCache, system: AgentSystem) -> None:
        self.trees = trees
        self._blueprints = blueprints
        self._system = system

    async def refusal(
        self,
        event: RecordedEvent,
        request: SubagentRequested,
        history: list[RecordedEvent],
        child: str,
    ) -> tuple[ChildOutcome, str] | None:
        """Why the spawn `request` (an event of the parent, whose `history` is given) may
        not create `child`, as the call's outcome and report; None: it may."""
        env = event.envelope
        tenant, parent, agency = env.tenant_id, env.aggregate_id, env.agency_id or ""
        root = env.correlation_id or parent
        bounds = self.trees.bounds.lowered(await self._limits_of(tenant, agency, history))
        why = await self.trees.admit(
            tenant,
            root,
            parent=parent,
            child=child,
            run_id=request.run_id,
            tool_call_id=request.tool_call_id,
            bounds=bounds,
            context=EventContext(agency_id=agency, thread_id=root, correlation_id=root),
        )
        if why is not None:
            return "error", why
        stopped = (await self.trees.view(tenant, root)).stopped_child(child)
        if stopped is None:
            return None
        return "canceled", TREE_TERMINATED if stopped.mode == "terminate" else TREE_CANCELED

    async def _limits_of(
        self, tenant: str, agency: str, history: list[RecordedEvent]
    ) -> TreeLimits | None:
        """The tree limits of the blueprint the thread of `history` was created with."""
        created = history[0].payload if history else None
        if not isinstance(created, ThreadCreated):
            return None
        if created.blueprint is not None:
            return created.blueprint.limits
        dynamic = await self._blueprints.dynamic(tenant, agency)
        found = dynamic.get(created.agent_type) or self._system.blueprints.get(created.agent_type)
        return found.limits if found is not None else None
