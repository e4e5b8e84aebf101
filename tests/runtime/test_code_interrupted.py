"""A code agent's run found begun by a drive that is gone (its worker died) is resumed:
the handler runs again against the run's record, repeating nothing the record holds. In
memory: no broker needed to stage a dead worker's leftovers."""

from __future__ import annotations

import asyncio

from agency.contracts.events import (
    AgentStarted,
    AnyEvent,
    ChatMessage,
    FileWritten,
    MessageAppended,
    ModelCompleted,
    ModelStarted,
    ReplyAction,
    ReplyThinking,
    RequestAccepted,
    RunCompleted,
    RunError,
    RunStarted,
    RunTick,
    ThreadCreated,
    ToolOutput,
    ToolStarted,
)
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.infra.tasks import cancel_and_wait
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.runtime.loop import ThreadDriver
from agency.services.runtime.replay.memstore import MemoryEventStore
from agency.services.threads.caches import BlueprintCache, ThreadCache
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


async def begun(store: MemoryEventStore, agent: str, text: str, *effects: AnyEvent) -> None:
    """A thread whose run r1 a worker began, recorded `effects` of, and died in."""
    await add(store, ThreadCreated(agency_id="a1", agent_type=agent))
    await add(store, RequestAccepted(run_id="r1", idempotency_key="k1", messages=(user(text),)))
    await add(
        store,
        RunStarted(run_id="r1", agent_type=agent, max_steps=25),
        MessageAppended(run_id="r1", message=user(text)),
        RunTick(run_id="r1", step=1),
        AgentStarted(run_id="r1", agent_type=agent, model="code:X"),
    )
    if effects:
        await add(store, *effects)


async def drive(store: MemoryEventStore, llm: FakeLLMServer) -> ThreadState:
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    try:
        driver = ThreadDriver(
            store, code_system(), provider, ThreadCache(store), BlueprintCache(store)
        )
        return await driver.drive(TENANT, THREAD)
    finally:
        await provider.close()


def of(store: MemoryEventStore, kind: type) -> list[RecordedEvent]:
    return [
        e for e in store.events(TENANT, "thread", THREAD) if isinstance(e.envelope.payload, kind)
    ]


async def test_a_begun_run_is_resumed_and_the_next_request_runs(llm: FakeLLMServer) -> None:
    store = MemoryEventStore()
    await begun(store, "counter", "one")
    await add(store, RequestAccepted(run_id="r2", idempotency_key="k2", messages=(user("two"),)))
    state = await drive(store, llm)
    assert state.run("r1").status == "completed"  # type: ignore[union-attr]
    assert state.run("r2").status == "completed"  # type: ignore[union-attr]
    assert state.agent_state == {"count": 2, "last": "two"}


async def test_a_resumed_handler_repeats_nothing_its_record_holds(llm: FakeLLMServer) -> None:
    store = MemoryEventStore()
    call = "call_1_r1"
    await begun(
        store,
        "counter",
        "one",
        ReplyAction(run_id="r1", name="write_file", arguments='{"path": "count.txt"}'),
        ToolStarted(
            run_id="r1",
            tool_call_id=call,
            tool_name="write_file",
            arguments='{"path": "count.txt", "content": "1"}',
        ),
        FileWritten(run_id="r1", path="count.txt", content="1"),
        ToolOutput(run_id="r1", tool_call_id=call, tool_name="write_file", output="recorded"),
    )
    state = await drive(store, llm)
    assert state.run("r1").status == "completed"  # type: ignore[union-attr]
    assert len(of(store, ToolStarted)) == 1 and len(of(store, ReplyAction)) == 1
    completed = of(store, RunCompleted)[0].envelope.payload
    assert completed.result == "count 1 (recorded)"  # type: ignore[union-attr]
    assert state.agent_state == {"count": 1, "last": "one"}


async def test_a_recorded_model_answer_is_not_asked_again(llm: FakeLLMServer) -> None:
    store = MemoryEventStore()
    answer = ChatMessage(role="assistant", content="recorded answer")
    await begun(
        store,
        "streamer",
        "hello",
        ReplyThinking(run_id="r1", text="answering hello"),
        ModelStarted(run_id="r1", step=1, model="openai:gpt-4.1-mini", message_count=1),
        ModelCompleted(run_id="r1", step=1, model="openai:gpt-4.1-mini", message=answer),
    )
    state = await drive(store, llm)
    assert state.run("r1").result == "Hi: recorded answer"  # type: ignore[union-attr]
    assert len(of(store, ModelStarted)) == 1 and len(of(store, ModelCompleted)) == 1


async def test_a_handler_that_does_not_repeat_its_record_ends_interrupted(
    llm: FakeLLMServer,
) -> None:
    store = MemoryEventStore()
    await begun(store, "counter", "one", ReplyThinking(run_id="r1", text="not what it does"))
    state = await drive(store, llm)
    assert state.run("r1").status == "error"  # type: ignore[union-attr]
    error = of(store, RunError)[0].envelope.payload
    assert error.kind == "interrupted"  # type: ignore[union-attr]
    assert "did not repeat its record" in error.error  # type: ignore[union-attr]


async def test_a_drive_stopped_mid_call_aborts_the_handler_and_the_next_drive_resumes(
    llm: FakeLLMServer,
) -> None:
    key = "code-stop-" + str(id(llm)) + str(id(ABORTS))
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
        first = asyncio.create_task(driver.drive(TENANT, THREAD))

        async def calling() -> None:
            assert of(store, ModelStarted)

        await assert_eventually(calling)
        await cancel_and_wait([first])  # a shutdown, or the lease lost
        assert ABORTS == [True]
    finally:
        await provider.close()
    llm.script(key, [ScriptStep(content="after the restart")])
    state = await drive(store, llm)
    assert state.run("r1").result == "after the restart"  # type: ignore[union-attr]
    assert len(of(store, ModelStarted)) == 1  # the cut call is made again, not recorded twice
