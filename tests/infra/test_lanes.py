"""Lanes: one handler at a time per lane, the worker's and a tenant's bounds, and a
tenant's held messages bounded with the reason named."""

from __future__ import annotations

import asyncio

from agency.infra.jetstream.lanes import TENANT_BACKLOG, LaneBounds, Lanes


async def _run(lanes: Lanes, jobs: list[tuple[str, str]]) -> tuple[int, dict[str, int]]:
    """Run one short job per (lane, tenant); the most running at once, overall and per lane."""
    running: dict[str, int] = {}
    most_per_lane: dict[str, int] = {}
    most = 0
    gate = asyncio.Event()

    async def job(lane: str, tenant: str) -> None:
        nonlocal most
        async with lanes.turn(lane, tenant):
            running[lane] = running.get(lane, 0) + 1
            most = max(most, sum(running.values()))
            most_per_lane[lane] = max(most_per_lane.get(lane, 0), running[lane])
            await gate.wait()
            await asyncio.sleep(0)
            running[lane] -= 1

    tasks = [asyncio.create_task(job(lane, tenant)) for lane, tenant in jobs]
    for _ in range(5):
        await asyncio.sleep(0)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
    return most, most_per_lane


async def test_a_hot_lane_runs_one_at_a_time_while_other_lanes_proceed() -> None:
    lanes = Lanes(LaneBounds(running=4))
    most, per_lane = await _run(lanes, [("hot", "b")] * 10 + [("x", "a"), ("y", "a")])
    assert per_lane == {"hot": 1, "x": 1, "y": 1}
    assert most == 3


async def test_a_tenant_takes_no_more_than_its_running_share() -> None:
    lanes = Lanes(LaneBounds(running=4, tenant_running=2))
    jobs = [(f"b{i}", "b") for i in range(6)] + [("a0", "a"), ("a1", "a")]
    most, _ = await _run(lanes, jobs)
    assert most == 4  # two of b, two of a: b never holds the worker's every slot


def test_held_messages_of_a_tenant_are_bounded_with_the_reason() -> None:
    lanes = Lanes(LaneBounds(running=2, tenant_held=2))
    assert lanes.hold("b") is None and lanes.hold("b") is None
    refused = lanes.hold("b") or ""
    assert refused.startswith(TENANT_BACKLOG) and "the bound is 2" in refused
    assert lanes.hold("a") is None  # another tenant is not held back
    lanes.release("b")
    assert lanes.hold("b") is None
