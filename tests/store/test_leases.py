"""Leases: one owner per key, taken again after a release, never from a live owner."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats.errors
import pytest

from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.leases import Lease, LeaseLost, Leases, LeaseSettings
from agency.infra.launch import NatsServer
from agency.infra.nats_auth import role_url
from tests.helpers import assert_eventually


async def test_a_lease_is_held_by_one_owner_and_taken_again_once_released(bus: Bus) -> None:
    here = await Leases(bus.js, owner="here").open()
    there = await Leases(bus.js, owner="there").open()
    key = "lease-" + new_id()
    first = await here.try_acquire(key)
    assert first is not None
    assert await there.try_acquire(key) is None
    assert await here.holder(key) == b"here"
    await first.release()
    assert await here.holder(key) is None

    # Released here: taken here again (the delete marker's revision is known here) ...
    again = await here.try_acquire(key)
    assert again is not None and again.revision > first.revision
    assert await there.try_acquire(key) is None
    await again.release()
    # ... and by another owner (who finds the marker first).
    theirs = await there.try_acquire(key)
    assert theirs is not None and await here.holder(key) == b"there"
    await theirs.release()


async def test_a_release_remembered_here_never_takes_a_lease_another_owner_took_since(
    bus: Bus,
) -> None:
    here = await Leases(bus.js, owner="here").open()
    there = await Leases(bus.js, owner="there").open()
    key = "lease-" + new_id()
    mine = await here.try_acquire(key)
    assert mine is not None
    await mine.release()
    theirs = await there.try_acquire(key)
    assert theirs is not None
    # The marker `here` remembers is no longer the key's last revision.
    assert await here.try_acquire(key) is None
    assert await here.holder(key) == b"there"
    await theirs.release()
    assert await here.try_acquire(key) is not None


class LateAnswers(Leases):
    """Leases whose renewals the server has written before their answer comes back, as on a
    busy machine; `written` is set once one has been."""

    def __init__(self, bus: Bus) -> None:
        super().__init__(bus.js, owner="late", settings=LeaseSettings(ttl=1.0))
        self.written = asyncio.Event()

    async def renew(self, key: str, revision: int) -> int:
        renewed = await super().renew(key, revision)
        self.written.set()
        await asyncio.sleep(0.2)  # the answer on its way back
        return renewed


async def test_work_that_ends_while_a_renewal_is_answered_lets_the_lease_go_at_once(
    bus: Bus,
) -> None:
    """The keeper is cancelled with its renewal written but not yet answered: the release
    must name the renewal's revision, or it is refused and the key stays held until it
    expires (another worker's drive of the thread waits out the time to live)."""
    late = await LateAnswers(bus).open()
    there = await Leases(bus.js, owner="there").open()
    key = "lease-" + new_id()

    async def work() -> str:
        await asyncio.wait_for(late.written.wait(), timeout=10)
        return "done"

    assert await late.run_owned(key, work) == "done"
    assert await late.holder(key) is None
    taken = await there.try_acquire(key)
    assert taken is not None
    await taken.release()


class LateTakes(Leases):
    """Leases whose taking the server has written before its answer comes back."""

    def __init__(self, bus: Bus) -> None:
        super().__init__(bus.js, owner="late-take")
        self.written = asyncio.Event()

    async def try_acquire(self, key: str) -> Lease | None:
        lease = await super().try_acquire(key)
        self.written.set()
        await asyncio.sleep(0.2)  # the answer on its way back
        return lease


async def test_work_cancelled_while_its_lease_is_being_taken_lets_the_lease_go(bus: Bus) -> None:
    """A drive cancelled (its worker stopping) after the server wrote its lease but before
    the answer came: nobody keeps that lease, so it is let go at once, not left to expire
    (10 s) while another worker's drive of the thread waits."""
    late = await LateTakes(bus).open()
    there = await Leases(bus.js, owner="there").open()
    key = "lease-" + new_id()

    async def work() -> str:
        raise AssertionError("work ran for a caller that was cancelled")

    owning = asyncio.create_task(late.run_owned(key, work))
    await asyncio.wait_for(late.written.wait(), timeout=10)
    owning.cancel()
    with pytest.raises(asyncio.CancelledError):
        await owning

    async def taken() -> Lease:
        lease = await there.try_acquire(key)
        assert lease is not None, "still held by a lease nobody keeps"
        return lease

    lease = await assert_eventually(taken, timeout=3)
    await lease.release()


async def test_the_bucket_a_restarted_server_lost_is_made_again_and_leases_go_on(
    tmp_path: Path,
) -> None:
    """The bucket lives in memory: after a SIGKILL and restart of the server it is gone, and
    the next lease operation makes it again, instead of finding no stream for ever."""
    async with NatsServer(tmp_path / "nats") as server, Bus(server.url, name="leases") as bus:
        leases = await Leases(bus.js, owner="here").open()
        key = "lease-" + new_id()
        before = await leases.try_acquire(key)
        assert before is not None

        await server.kill()
        await server.start()

        async def acquired() -> Lease:
            try:
                lease = await leases.try_acquire(key)
            except (nats.errors.Error, TimeoutError) as e:  # the server is still starting
                raise AssertionError(f"not answering yet: {e!r}") from e
            assert lease is not None
            return lease

        after = await assert_eventually(acquired, timeout=20)
        assert after.revision > before.revision
        assert await leases.holder(key) == b"here"
        # The owner of the lost lease cannot renew it: its revision is not the key's.
        with pytest.raises(LeaseLost):
            await before.keep()
        there = await Leases(bus.js, owner="there").open()
        assert await there.try_acquire(key) is None
        await after.release()
        assert await leases.holder(key) is None


async def test_the_runtime_s_own_user_makes_the_bucket_and_takes_leases(tmp_path: Path) -> None:
    """The runtime connects as its own user, allowed only what its work needs: making the
    bucket (and moving its revisions on) is among it."""
    async with NatsServer(tmp_path / "nats", auth=True) as server:
        assert server.auth is not None
        url = role_url(server.admin_url, str(server.auth.directory), "runtime")
        async with Bus(url, name="agency-runtime") as bus:
            leases = await Leases(bus.js, owner="runtime").open()
            lease = await leases.try_acquire("lease-" + new_id())
            assert lease is not None
            await lease.release()
