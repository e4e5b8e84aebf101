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
