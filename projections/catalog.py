"""The projections the projector runs, by name."""

from __future__ import annotations

from projections.errors import UnknownProjection
from projections.projection import Projection
from projections.readmodels import events

ALL: tuple[Projection, ...] = (events.PROJECTION,)


def by_name(name: str) -> Projection:
    for projection in ALL:
        if projection.name == name:
            return projection
    raise UnknownProjection(name, [p.name for p in ALL])
