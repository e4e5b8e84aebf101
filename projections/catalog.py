"""The projections the projector runs, by name."""

from __future__ import annotations

from projections.errors import UnknownProjection
from projections.projection import Projection
from projections.readmodels import (
    agent_state,
    children,
    conversation,
    events,
    registry,
    threads,
    usage,
    workflows,
)

ALL: tuple[Projection, ...] = (
    events.PROJECTION,
    registry.TENANTS,
    registry.AGENCIES,
    registry.BLUEPRINTS,
    threads.PROJECTION,
    conversation.MESSAGES,
    conversation.TODOS,
    conversation.FILES,
    conversation.PENDING_TOOL_CALLS,
    conversation.SUBAGENT_LINKS,
    children.PROJECTION,
    agent_state.AGENT_STATES,
    usage.PROJECTION,
    workflows.PROJECTION,
)


def by_name(name: str) -> Projection:
    for projection in ALL:
        if projection.name == name:
            return projection
    raise UnknownProjection(name, [p.name for p in ALL])
