"""A model step asks the model while its opening events are being stored.

The store holds back the append that opens a step (the one carrying `model.started`), so
the test sees what the loop does meanwhile; the model is the fake over real HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agency.contracts.events import (
    AnyEvent,
    BlueprintSpec,
    ChatMessage,
    ModelStarted,
    RequestAccepted,
    RunCanceled,
    RunCompleted,
    ThreadCreated,
)
from agency.contracts.ids import new_id
from agency.contracts.subjects import Aggregate
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.records import AppendResult, EventContext, Position
from agency.services.agents.system import AgentSystem
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.runtime.loop import OPENING_HOLD, ThreadDriver
from agency.services.runtime.replay.memstore import MemoryEventStore
from agency.services.threads.caches import BlueprintCache, ThreadCache
from tests.helpers import assert_eventually
from tests.runtime.test_loop import assert_gapless

CONTEXT = EventContext(agency_id="a1", thread_id="th1")


class HeldOpening(MemoryEventStore):
    """Holds the first append that opens a model step until `release` is set; `before`
    runs first (another writer's append, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.before: list[AnyEvent] = []

    async def append(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        payloads: Sequence[AnyEvent],
        *,
        expected: Position,
        context: EventContext | None = None,
        idempotency_key: str | None = None,
        keyed: int | None = None,
    ) -> AppendResult:
        opening = any(isinstance(p, ModelStarted) for p in payloads)
        if opening and not self.holding.is_set():
            self.holding.set()
            await self.release.wait()
            if self.before:
                last = await self.last_position(tenant_id, aggregate, aggregate_id)
                await super().append(
                    tenant_id, aggregate, aggregate_id, self.before, expected=last, context=CONTEXT
                )
        return await super().append(
            tenant_id,
            aggregate,
            aggregate_id,
            payloads,
            expected=expected,
            context=context,
            idempotency_key=idempotency_key,
            keyed=keyed,
        )


async def _thread(store: MemoryEventStore, key: str) -> None:
    await store.append(
        "t1",
        "thread",
        "th1",
        [
            ThreadCreated(agency_id="a1", agent_type="plain"),
            RequestAccepted(
                run_id="r1",
                idempotency_key="k1",
                messages=(ChatMessage(role="user", content=key),),
            ),
        ],
        expected=Position(),
        context=CONTEXT,
    )


async def _drive_until_held(
    store: HeldOpening, provider: OpenAIProvider, llm: FakeLLMServer, key: str
) -> asyncio.Future[ThreadState]:
    """The thread's drive, once its opening is held and the model has been asked."""
    system = AgentSystem().add_agent(BlueprintSpec(name="plain"))
    driver = ThreadDriver(store, system, provider, ThreadCache(store), BlueprintCache(store))
    drive = asyncio.ensure_future(driver.drive("t1", "th1"))
    await asyncio.wait_for(store.holding.wait(), 10)

    async def asked() -> None:
        assert any(c.key == key for c in llm.calls)

    await assert_eventually(asked)
    return drive


async def test_the_model_is_asked_before_the_opening_is_stored_and_its_text_follows_it(
    llm: FakeLLMServer,
) -> None:
    key = "overlap-" + new_id()
    answer = "one two three four five six seven eight"
    llm.script(key, [ScriptStep(content=answer, stream_delay_ms=40)])
    store = HeldOpening()
    await _thread(store, key)
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    try:
        drive = await _drive_until_held(store, provider, llm, key)
        # The opening is still held, and the model has the request already.
        assert "model.started" not in [e.type for e in store.events("t1", "thread", "th1")]
        store.release.set()
        state = await asyncio.wait_for(drive, 30)
    finally:
        await provider.close()
    events = store.events("t1", "thread", "th1")
    kinds = [e.type for e in events]
    assert_gapless(events)
    assert state.run("r1").status == "completed"  # type: ignore[union-attr]
    completed = next(e.payload for e in events if isinstance(e.payload, RunCompleted))
    assert completed.result == answer
    # What the model streamed is stored after the opening, never before it.
    assert "model.delta" in kinds
    assert kinds.index("model.started") < kinds.index("model.delta")
    assert kinds.index("model.delta") < kinds.index("model.completed")


async def test_an_opening_that_does_not_land_abandons_the_call(llm: FakeLLMServer) -> None:
    key = "overlap-lost-" + new_id()
    # An answer that would keep the drive waiting far past the bound below.
    llm.script(key, [ScriptStep(content="too late", delay_ms=60_000)])
    store = HeldOpening()
    store.before = [RunCanceled(run_id="r1", reason="canceled meanwhile")]
    await _thread(store, key)
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    try:
        drive = await _drive_until_held(store, provider, llm, key)
        store.release.set()
        # The cancel won the race: the drive stops without waiting for the model.
        state = await asyncio.wait_for(drive, 10)
    finally:
        await provider.close()
    kinds = [e.type for e in store.events("t1", "thread", "th1")]
    assert state.run("r1").status == "canceled"  # type: ignore[union-attr]
    assert not any(k.startswith("model.") for k in kinds)


class CountedAppends(MemoryEventStore):
    """Records the event types of each append, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    async def append(self, *args: Any, **kwargs: Any) -> AppendResult:
        result = await super().append(*args, **kwargs)
        self.batches.append([e.type for e in result.events])
        return result


async def _drive_to_the_end(
    store: CountedAppends, llm: FakeLLMServer, *, opening_hold: float = OPENING_HOLD
) -> list[list[str]]:
    """The appends of a run driven from its acceptance to its end (the thread's own two
    events aside)."""
    system = AgentSystem().add_agent(BlueprintSpec(name="plain"))
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    try:
        driver = ThreadDriver(
            store,
            system,
            provider,
            ThreadCache(store),
            BlueprintCache(store),
            opening_hold=opening_hold,
        )
        state = await asyncio.wait_for(driver.drive("t1", "th1"), 30)
    finally:
        await provider.close()
    assert state.run("r1").status == "completed"  # type: ignore[union-attr]
    assert_gapless(store.events("t1", "thread", "th1"))
    return store.batches[1:]


async def test_an_answer_that_comes_whole_at_once_is_stored_with_its_opening(
    llm: FakeLLMServer,
) -> None:
    key = "whole-" + new_id()
    llm.script(key, [ScriptStep(content="at once")])
    store = CountedAppends()
    await _thread(store, key)
    # A hold far longer than the fake model's answer, however loaded the machine: what is
    # asserted is where an answer that came within the hold is stored, not how fast it came.
    batches = await _drive_to_the_end(store, llm, opening_hold=10.0)
    assert len(batches) == 1, batches
    assert {"model.started", "model.completed", "run.completed"} <= set(batches[0])


async def test_an_answer_slower_than_the_hold_finds_its_opening_stored(
    llm: FakeLLMServer,
) -> None:
    key = "slow-" + new_id()
    llm.script(key, [ScriptStep(content="later", delay_ms=round(OPENING_HOLD * 1000) + 300)])
    store = CountedAppends()
    await _thread(store, key)
    batches = await _drive_to_the_end(store, llm)
    assert len(batches) == 2, batches
    assert "model.started" in batches[0] and "model.completed" not in batches[0]
    assert {"model.completed", "run.completed"} <= set(batches[1])
