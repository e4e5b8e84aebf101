"""What goes wrong with an archive: each error says what and what to do, and names the
HTTP status it answers."""

from __future__ import annotations


class ArchiveError(Exception):
    """An archive that cannot be written or imported as asked."""

    status = 400


class MalformedArchive(ArchiveError):
    """Not an archive this deployment can read: a broken file, a missing part, a checksum
    or an event that does not match."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(f"malformed archive: {problem}")


class UnsupportedArchive(ArchiveError):
    """An archive of another format version."""

    def __init__(self, version: object, supported: int) -> None:
        self.version = version
        super().__init__(
            f"archive format version {version!r} is not supported: this deployment reads "
            f"version {supported}; export it again with this version of Agency"
        )


class ArchiveCollision(ArchiveError):
    """The target already holds something the archive would create."""

    status = 409

    def __init__(self, aggregate: str, aggregate_id: str, tenant_id: str) -> None:
        self.aggregate = aggregate
        self.aggregate_id = aggregate_id
        super().__init__(
            f"{aggregate} {aggregate_id} already exists in tenant {tenant_id}: "
            "the archive was imported already, or import it into another tenant"
        )


class NotQuiet(ArchiveError):
    """A thread with work in progress: its archive could not replay to the same state."""

    status = 409

    def __init__(self, thread_id: str, why: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"thread {thread_id} is not idle ({why}): export it once its runs have ended, "
            "or cancel them first"
        )


class NothingToExport(ArchiveError):
    status = 404

    def __init__(self, what: str, ident: str, tenant_id: str) -> None:
        super().__init__(f"{what} {ident} has no events in tenant {tenant_id}: check the id")


class ArchiveRefused(ArchiveError):
    """An import the caller may not make (a whole tenant needs the operator)."""

    status = 403


class RefusedBlueprint(ArchiveError):
    """A blueprint in the archive that no tenant may save here (a `command` MCP server, an
    address its connections may not reach, a prompt over the limit)."""

    def __init__(self, event_id: str, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(
            f"the archive's event {event_id} holds a blueprint this deployment refuses "
            f"({reason}): {detail}"
        )
