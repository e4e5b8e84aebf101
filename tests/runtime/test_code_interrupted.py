"""A code agent's run found begun by a drive that is gone ends as `interrupted`; the next
request runs normally. In memory: no broker needed to stage a dead worker's leftovers."""

from __future__ import annotations

import asyncio

from contracts.events import (
    AgentStarted,
    AnyEvent,
    ChatMessage,
    MessageAppended,
    RequestAccepted,
    RunError,
    RunStarted,
    RunTick,
    ThreadCreated,
)
from infra.jetstream.records import EventContext
from infra.tasks import cancel_and_wait
from services.llm.fake_scripts import ScriptStep
from services.llm.fake_server import FakeLLMServer
from services.llm.provider import OpenAIProvider
from services.replay.memstore import MemoryEventStore
from services.runtime.cache import BlueprintCache, ThreadCache
from services.runtime.loop import ThreadDriver
from tests.helpers import assert_eventually
from tests.runtime.test_code_agents import ABORTS, code_system

TENANT, THREAD = "t1", "th1"


async def add(store: MemoryEventStore, *events: AnyEvent, key: str | None = None) -> None:
    position = await store.last_position(TENANT, "thread", THREAD)
    await store.append(
        TENANT,
        "thread",
        THREAD,
        list(events),
        expected=position,
        context=EventContext(agency_id="a1", thread_id=THREAD),
        idempotency_key=key,
    )


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


async def test_a_begun_run_without_its_drive_ends_interrupted(llm: FakeLLMServer) -> None:
    store = MemoryEventStore()
    await add(store, ThreadCreated(agency_id="a1", agent_type="counter"))
    await add(store, RequestAccepted(run_id="r1", idempotency_key="k1", messages=(user("one"),)))
    # What a worker that died inside the handler left behind.
    await add(
        store,
        RunStarted(run_id="r1", agent_type="counter", max_steps=25),
        MessageAppended(run_id="r1", message=user("one")),
        RunTick(run_id="r1", step=1),
        AgentStarted(run_id="r1", agent_type="counter", model="code:Counter"),
    )
    await add(store, RequestAccepted(run_id="r2", idempotency_key="k2", messages=(user("two"),)))
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    try:
        driver = ThreadDriver(
            store, code_system(), provider, ThreadCache(store), BlueprintCache(store)
        )
        state = await driver.drive(TENANT, THREAD)
    finally:
        await provider.close()
    events = store.events(TENANT, "thread", THREAD)
    errors = [e.payload for e in events if isinstance(e.payload, RunError)]
    assert [(e.run_id, e.kind) for e in errors] == [("r1", "interrupted")]
    assert state.run("r1").status == "error"  # type: ignore[union-attr]
    assert state.run("r2").status == "completed"  # type: ignore[union-attr]
    assert state.agent_state == {"count": 1, "last": "two"}


async def test_a_drive_stopped_mid_handler_aborts_it_and_the_next_drive_ends_the_run(
    llm: FakeLLMServer,
) -> None:
    key = "code-stop-" + THREAD + str(id(llm))
    llm.script(key, [ScriptStep(content="never", delay_ms=20_000)])
    ABORTS.clear()
    store = MemoryEventStore()
    await add(store, ThreadCreated(agency_id="a1", agent_type="slow"))
    await add(store, RequestAccepted(run_id="r1", idempotency_key="k1", messages=(user(key),)))
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    try:
        driver = ThreadDriver(
            store, code_system(), provider, ThreadCache(store), BlueprintCache(store)
        )
        drive = asyncio.create_task(driver.drive(TENANT, THREAD))

        async def calling() -> None:
            types = [e.type for e in store.events(TENANT, "thread", THREAD)]
            assert "model.started" in types

        await assert_eventually(calling)
        await cancel_and_wait([drive])  # a shutdown, or the lease lost
        assert ABORTS == [True]
        state = await ThreadDriver(
            store, code_system(), provider, ThreadCache(store), BlueprintCache(store)
        ).drive(TENANT, THREAD)
    finally:
        await provider.close()
    assert state.run("r1").status == "error"  # type: ignore[union-attr]
    assert state.run("r1").reason == "interrupted"  # type: ignore[union-attr]
