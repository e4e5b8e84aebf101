"""The built-in middleware: planning, filesystem and hitl."""

from __future__ import annotations

from services.agents.builtin.filesystem import FilesystemMiddleware
from services.agents.builtin.hitl import HitlMiddleware
from services.agents.builtin.planning import PlanningMiddleware
from services.agents.builtin.subagents import SubagentsMiddleware
from services.agents.middleware import Middleware


def default_middleware() -> list[tuple[Middleware, tuple[str, ...]]]:
    """What `AgentSystem.defaults()` registers, with the tags that select each."""
    return [
        (PlanningMiddleware(), ("default",)),
        (FilesystemMiddleware(), ("default",)),
        (SubagentsMiddleware(), ("default",)),
        (HitlMiddleware(), ("hitl",)),
    ]


__all__ = [
    "FilesystemMiddleware",
    "HitlMiddleware",
    "PlanningMiddleware",
    "SubagentsMiddleware",
    "default_middleware",
]
