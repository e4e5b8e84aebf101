"""Agent systems that differ from the recorded one, for re-execution to catch (`--app`)."""

from __future__ import annotations

from typing import Any

from agency.domain.thread_state import ThreadState
from agency.services.agents.builtin import PlanningMiddleware, default_middleware
from agency.services.agents.builtin.planning import WRITE_TODOS, write_todos
from agency.services.agents.middleware import Middleware, MiddlewareContext, ModelPlan
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import StateTool, StateToolOutcome
from tests.runtime.conftest import make_system


class AuditMiddleware(Middleware):
    """A middleware added since the run was recorded: one more hook around each model call."""

    name = "audit"

    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:
        return None


def with_audit() -> AgentSystem:
    return make_system().use(AuditMiddleware(), ["default"])


def terse_todos(args: dict[str, Any], state: ThreadState, run_id: str) -> StateToolOutcome:
    """Writes the same todos, answers the model differently."""
    return StateToolOutcome(output="ok", events=write_todos(args, state, run_id).events)


class TersePlanning(PlanningMiddleware):
    """The planning middleware with a `write_todos` whose answer changed."""

    def state_tools(self) -> tuple[StateTool, ...]:
        return (StateTool(spec=WRITE_TODOS, fn=terse_todos),)


def with_terse_todos() -> AgentSystem:
    recorded = make_system()
    system = AgentSystem()
    for middleware, tags in default_middleware():
        system.use(
            TersePlanning() if isinstance(middleware, PlanningMiddleware) else middleware, tags
        )
    for name in ("lookup", "lookup_guarded"):
        tool = recorded.external_tool(name)
        assert tool is not None
        system.add_tool(tool, ["lookup"])
    for blueprint in recorded.blueprints.values():
        system.add_agent(blueprint)
    return system


recorded = make_system


class BrokenMiddleware(Middleware):
    """A middleware whose hook now raises."""

    name = "planning"

    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:
        raise RuntimeError("the new hook is broken")


def with_broken_hook() -> AgentSystem:
    return make_system().use(BrokenMiddleware(), ["default"])
