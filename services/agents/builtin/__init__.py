"""The built-in middleware: planning, filesystem, subagents, hitl and workflow context."""

from __future__ import annotations

from services.agents.builtin.filesystem import FilesystemMiddleware
from services.agents.builtin.hitl import HitlMiddleware
from services.agents.builtin.planning import PlanningMiddleware
from services.agents.builtin.subagents import SubagentsMiddleware
from services.agents.builtin.workflow import WorkflowMiddleware
from services.agents.middleware import Middleware


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
