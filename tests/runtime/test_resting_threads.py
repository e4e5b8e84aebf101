"""Threads at rest (parked on an approval, ended) leave the folded-thread cache after the
last `resting` of them, and are read back from the log when someone acts on them."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest

from agency.contracts.events import ToolOutput
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.domain.thread_parts import RunView
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime import service as runtime_service
from agency.services.threads.caches import ThreadCache
from tests.runtime.conftest import Agents, running_agents


@pytest.fixture
async def evicting(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Agents, list[ThreadCache]]]:
    """The agents, their runtime keeping no thread at rest folded; its caches."""
    caches: list[ThreadCache] = []

    def cache(*args: object, **kwargs: object) -> ThreadCache:
        made = functools.partial(ThreadCache, resting=0)(*args, **kwargs)  # type: ignore[arg-type]
        caches.append(made)
        return made

    monkeypatch.setattr(runtime_service, "ThreadCache", cache)
    async with running_agents(bus, nats_url, tenant, llm) as running:
        yield running, caches


async def test_a_parked_thread_evicted_from_the_cache_resumes_when_approved(
    evicting: tuple[Agents, list[ThreadCache]],
) -> None:
    agents, caches = evicting
    key = "resting-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "kept"}}]),
        ScriptStep(content="finished"),
    ])  # fmt: skip
    thread = await agents.thread("approver")
    await agents.invoke(thread, key)
    await agents.wait_for(thread, lambda es: any(e.type == "run.paused" for e in es))
    assert caches and all(c.cached(agents.tenant, thread) is None for c in caches)

    await agents.approve(thread, approved=True)
    events = await agents.wait_terminal(thread)
    outputs = [e.payload.output for e in events if isinstance(e.payload, ToolOutput)]
    assert outputs == ["definition of kept"]
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_the_cache_keeps_the_last_threads_at_rest_and_every_busy_one(
    bus: Bus, tenant: str
) -> None:
    cache = ThreadCache(bus.store, capacity=10, resting=2)

    def thread(name: str, status: str | None) -> ThreadState:
        runs = (RunView(run_id="r", status=status),) if status else ()  # type: ignore[arg-type]
        return ThreadState(
            tenant_id=tenant, thread_id=name, exists=True, runs=runs,
            active_run_id="r" if status else None,
        )  # fmt: skip

    for name in ("p1", "p2", "p3"):
        cache.put(thread(name, "paused"))
    for name in ("b1", "b2"):
        cache.put(thread(name, "running"))
    cache.put(thread("idle", None))
    kept = {n for n in ("p1", "p2", "p3", "b1", "b2", "idle") if cache.cached(tenant, n)}
    assert kept == {"p3", "idle", "b1", "b2"}

    cache.put(thread("b1", "paused"))  # a busy thread that parks moves among those at rest
    assert cache.cached(tenant, "idle") is not None
    assert cache.cached(tenant, "p3") is None
    assert len(cache) == 3


def test_shedding_drops_every_thread_at_rest_and_keeps_the_others() -> None:
    cache = ThreadCache(store=None)  # type: ignore[arg-type]  # nothing is read here
    cache.put(ThreadState(tenant_id="t", thread_id="a"))
    cache.put(ThreadState(tenant_id="t", thread_id="b"))
    assert len(cache) == 2
    assert cache.shed_resting() == 2
    assert len(cache) == 0 and cache.cached("t", "a") is None
