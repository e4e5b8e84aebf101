"""The built-in middleware: planning, filesystem, subagents, hitl and workflow context."""

from __future__ import annotations

from agency.services.agents.builtin.filesystem import FilesystemMiddleware
from agency.services.agents.builtin.hitl import HitlMiddleware
from agency.services.agents.builtin.planning import PlanningMiddleware
from agency.services.agents.builtin.subagents import SubagentsMiddleware
from agency.services.agents.builtin.workflow import WorkflowMiddleware
from agency.services.agents.middleware import Middleware


def default_middleware() -> list[tuple[Middleware, tuple[str, ...]]]:
    """What `AgentSystem.defaults()` registers, with the tags that select each."""
    return [
        (PlanningMiddleware(), ("default",)),
        (FilesystemMiddleware(), ("default",)),
        (SubagentsMiddleware(), ("default",)),
        (HitlMiddleware(), ("hitl",)),
        (WorkflowMiddleware(), ("workflow",)),
    ]


__all__ = [
    "FilesystemMiddleware",
    "HitlMiddleware",
    "PlanningMiddleware",
    "SubagentsMiddleware",
    "WorkflowMiddleware",
    "default_middleware",
]
