"""Errors of the projection engine."""

from __future__ import annotations

from agency.contracts.errors import StructuredError


class ProjectionError(StructuredError, init=False):
    """Base of projection errors."""


class UnknownProjection(ProjectionError):
    name: str
    known: list[str]

    def describe(self) -> str:
        return f"no projection named {self.name!r}; known projections: {', '.join(self.known)}"


class ProjectionGap(ProjectionError):
    """An aggregate's events arrived with a hole in its sequence."""

    projection: str
    aggregate: str
    expected_seq: int
    got_seq: int

    def describe(self) -> str:
        expected, got = self.expected_seq, self.got_seq
        return (
            f"projection {self.projection}: {self.aggregate} jumped from seq {expected - 1} to "
            f"{got}; events {expected}..{got - 1} are missing from the log"
        )


class CommitsLost(ProjectionError):
    """The checkpoint is behind what this runner committed: the database lost commits it
    had acknowledged (a crash without synchronous commit, a failover to a lagging replica)."""

    projection: str
    checkpoint: int
    committed: int
    message = (
        "projection {projection}: the database's checkpoint is {checkpoint}, but this "
        "runner had committed up to {committed}; events after {checkpoint} are applied again"
    )
