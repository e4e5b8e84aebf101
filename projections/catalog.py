"""The projections the projector runs, by name."""

from __future__ import annotations

from agency.projections.errors import UnknownProjection
from agency.projections.projection import Projection
from agency.projections.readmodels import (
    agent_state,
    children,
    conversation,
    events,
    registry,
    store,
    threads,
    usage,
    webhooks,
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
    store.PROJECTION,
    webhooks.PROJECTION,
    webhooks.PUSH_CONFIGS,
)
# Every read model's name: what a read of "everything the API serves" waits for.
NAMES: tuple[str, ...] = tuple(p.name for p in ALL)


def by_name(name: str) -> Projection:
    for projection in ALL:
        if projection.name == name:
            return projection
    raise UnknownProjection(name, [p.name for p in ALL])
