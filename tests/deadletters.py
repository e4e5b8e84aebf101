"""A tenant's dead letters, read the way `agency dlq` reads them.

Letters are dropped and replayed by other tests while the suite runs, so the stream has
holes: it is walked with `next=True` reads, never by sequence arithmetic.
"""

from __future__ import annotations

from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.dlq_admin import MAX_PAGE, LetterInfo, list_letters


async def dead_letters(bus: Bus, tenant: str) -> list[LetterInfo]:
    """The tenant's letters, oldest first."""
    found: list[LetterInfo] = []
    seq = 1
    while True:
        page = await list_letters(bus.js, from_seq=seq, limit=MAX_PAGE, tenant=tenant)
        found.extend(page)
        if len(page) < MAX_PAGE:
            return found
        seq = page[-1].seq + 1


async def dead_letters_for(bus: Bus, tenant: str) -> list[tuple[str, str, bytes]]:
    """(reason, detail, data) of the tenant's letters, oldest first."""
    return [
        (letter.reason, letter.detail, letter.data) for letter in await dead_letters(bus, tenant)
    ]
