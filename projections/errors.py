"""Errors of the projection engine."""

from __future__ import annotations


class ProjectionError(Exception):
    """Base of projection errors."""


class UnknownProjection(ProjectionError):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        super().__init__(f"no projection named {name!r}; known projections: {', '.join(known)}")


class ProjectionGap(ProjectionError):
    """An aggregate's events arrived with a hole in its sequence."""

    def __init__(self, projection: str, aggregate: str, expected_seq: int, got_seq: int) -> None:
        self.projection = projection
        self.aggregate = aggregate
        self.expected_seq = expected_seq
        self.got_seq = got_seq
        super().__init__(
            f"projection {projection}: {aggregate} jumped from seq {expected_seq - 1} to "
            f"{got_seq}; events {expected_seq}..{got_seq - 1} are missing from the log"
        )


class CommitsLost(ProjectionError):
    """The checkpoint is behind what this runner committed: the database lost commits it
    had acknowledged (a crash without synchronous commit, a failover to a lagging replica)."""

    def __init__(self, projection: str, checkpoint: int, committed: int) -> None:
        self.projection = projection
        self.checkpoint = checkpoint
        self.committed = committed
        super().__init__(
            f"projection {projection}: the database's checkpoint is {checkpoint}, but this "
            f"runner had committed up to {committed}; events after {checkpoint} are applied again"
        )
