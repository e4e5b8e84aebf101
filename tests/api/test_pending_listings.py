"""A create answered before the read models list the thread: the tenant's next list waits
for them (`services/api/thread_create.py`)."""

from __future__ import annotations

from collections.abc import Iterable

from agency.services.api.thread_create import LISTING, PendingListings


class Progress:
    """Stands in for the projections' progress: `applied` is how far they have come."""

    def __init__(self) -> None:
        self.applied = 0
        self.asked: list[int] = []
        # By partition of the log, when one is asked about other than partition 0.
        self.applied_in: dict[int, int] = {}
        self.asked_in: list[tuple[int, int]] = []

    async def wait_passed(
        self, names: Iterable[str], stream_seq: int, timeout: float, *, partition: int = 0
    ) -> bool:
        assert tuple(names) == LISTING
        self.asked.append(stream_seq)
        self.asked_in.append((partition, stream_seq))
        return self.applied_in.get(partition, self.applied) >= stream_seq


def listings(progress: Progress, capacity: int = 10) -> PendingListings:
    return PendingListings(progress, capacity)  # type: ignore[arg-type]


async def test_a_list_waits_for_the_last_creation_of_its_tenant_only() -> None:
    assert "threads" in LISTING  # the read model the lists read
    progress = Progress()
    pending = listings(progress)
    assert await pending.listed("acme", 1.0)
    assert progress.asked == []  # nothing created here: nothing to wait for

    pending.mark("acme", 7)
    pending.mark("acme", 5)  # an earlier creation answered later: the later one counts
    pending.mark("other", 9)
    assert not await pending.listed("acme", 1.0)
    assert progress.asked == [7]

    progress.applied = 7
    assert await pending.listed("acme", 1.0)
    # Once listed, the tenant's lists no longer wait; another tenant's still do.
    assert await pending.listed("acme", 1.0)
    assert progress.asked == [7, 7]
    assert not await pending.listed("other", 1.0)
    assert progress.asked[-1] == 9


async def test_past_its_capacity_the_oldest_tenant_is_let_go() -> None:
    progress = Progress()
    pending = listings(progress, capacity=2)
    for seq, tenant in enumerate(("a", "b", "c"), start=1):
        pending.mark(tenant, seq)
    assert await pending.listed("a", 1.0)
    assert progress.asked == []
    assert not await pending.listed("b", 1.0)
    assert progress.asked == [2]


async def test_on_a_partitioned_log_a_list_waits_for_each_partitions_last_creation() -> None:
    progress = Progress()
    pending = listings(progress)
    pending.mark("acme", 7, partition=0)
    pending.mark("acme", 3, partition=2)
    progress.applied_in = {0: 7, 2: 2}
    assert not await pending.listed("acme", 1.0)
    assert progress.asked_in == [(0, 7), (2, 3)]
    progress.applied_in[2] = 3
    assert await pending.listed("acme", 1.0)
    # Partition 0 was passed already: only partition 2 was asked about again.
    assert progress.asked_in[2:] == [(2, 3)]
    assert await pending.listed("acme", 1.0)
    assert len(progress.asked_in) == 3
