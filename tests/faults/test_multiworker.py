"""Three runtime workers (separate processes) and a model answering in 0.5-2 s: one model
call per step, every run completes; and the same with a worker SIGKILLed mid model call."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_server import FakeLLMServer
from tests.faults.harness import Harness
from tests.faults.workload import Workload, model_calls_per_step, outcomes, violations

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

THREADS = 30  # a third each: tools, HITL, a subagent (with a tool) per thread
RUNS = THREADS + THREADS // 3  # the subagents' runs too
WORKERS = {"registry": 1, "runtime": 3, "tools": 1, "subagents": 1}


@pytest.fixture
async def slow_llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer(instant=True, latency_ms=(500, 2000)) as llm:
        yield llm


async def in_flight(llm: FakeLLMServer, at_least: int, timeout: float = 60.0) -> int:
    """Wait until at least `at_least` model calls are unanswered at once; how many are."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        flying = sum(1 for c in llm.calls if not c.finished)
        if flying >= at_least:
            return flying
        assert loop.time() < deadline, f"only {flying} model calls in flight"
        await asyncio.sleep(0.05)


async def worker_mid_call(
    system: Harness, llm: FakeLLMServer, name: str, timeout: float = 60.0
) -> str:
    """The label of a `name` worker with a model call in flight (its client port is one of
    the worker process's connections), once there is one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        ports = {c.client_port for c in llm.calls if not c.finished}
        for service in system.services:
            if service.name != name or not service.alive or service.proc is None:
                continue
            mine = {c.laddr.port for c in psutil.Process(service.proc.pid).net_connections("tcp")}
            if mine & ports:
                return service.label
        assert loop.time() < deadline, f"no {name} worker had a model call in flight"
        await asyncio.sleep(0.05)


async def test_three_runtime_workers_make_one_model_call_per_step(
    tmp_path: Path, slow_llm: FakeLLMServer, tenant: str
) -> None:
    async with (
        Harness(tmp_path / "system", slow_llm.base_url, workers=WORKERS) as system,
        Bus(system.nats_url, name="workload") as bus,
    ):
        load = Workload(bus, slow_llm, tenant, threads=THREADS)
        await load.setup()
        await load.start()
        try:
            histories = await load.settle(timeout=240)
        finally:
            await load.stop()
        crashes = system.crash_report()

    assert violations(histories) == []
    assert outcomes(histories) == Counter({"run.completed": RUNS})
    wrong, cut = model_calls_per_step(slow_llm, load.planned)
    assert wrong == {} and cut == 0
    assert crashes == ""


async def test_a_runtime_worker_killed_mid_model_call_costs_only_that_call(
    tmp_path: Path, slow_llm: FakeLLMServer, tenant: str
) -> None:
    async with (
        Harness(tmp_path / "system", slow_llm.base_url, workers=WORKERS) as system,
        Bus(system.nats_url, name="workload") as bus,
    ):
        load = Workload(bus, slow_llm, tenant, threads=THREADS)
        await load.setup()
        await load.start()
        try:
            await in_flight(slow_llm, at_least=6)
            await system.kill(await worker_mid_call(system, slow_llm, "runtime"))
            histories = await load.settle(timeout=240)
        finally:
            await load.stop()
        crashes = system.crash_report()

    assert violations(histories) == []
    assert outcomes(histories) == Counter({"run.completed": RUNS})
    wrong, cut = model_calls_per_step(slow_llm, load.planned)
    # The killed worker's calls were cut short and made again by another worker; every
    # step still has exactly one answered call, and a run lost at most its one call.
    assert wrong == {}
    assert 0 < cut <= RUNS
    assert crashes == ""
