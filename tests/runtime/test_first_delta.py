"""The first text of a streamed answer is in the log at once; what follows is coalesced.

The fake model sends its first token and then holds the rest back until the test lets it
go, so the order of what is stored shows whether the first text waited for anything more.
"""

from __future__ import annotations

from agency.contracts.events import ModelDelta
from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep, text_chunks
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import ModelSettings, OpenAIProvider
from tests.runtime.conftest import Agents, running_stack

# A window no test would outlast: text that waited for it would never be seen here.
LONG_WINDOW = ModelSettings(coalesce_ms=600_000)


async def test_the_first_text_is_stored_while_the_model_holds_the_rest_back(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    key = "first-delta-" + tenant
    answer = " ".join(f"word{i}" for i in range(40))
    llm.script(key, [ScriptStep(content=answer)])
    hold = llm.hold(key)
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake", settings=LONG_WINDOW)
    try:
        async with running_stack(bus, nats_url, tenant, provider) as agency:
            agents = Agents(bus=bus, tenant=tenant, agency=agency, llm=llm)
            thread = await agents.thread()
            await agents.invoke(thread, key)
            # The model is still holding every token after its first one back.
            events = await agents.wait_for(
                thread, lambda es: any(e.type == "model.delta" for e in es), timeout=15
            )
            assert not hold.is_set()
            first = [e.payload.delta for e in events if isinstance(e.payload, ModelDelta)]
            assert first == [text_chunks(answer)[0]]
            assert "model.completed" not in [e.type for e in events]
            hold.set()
            events = await agents.wait_terminal(thread)
    finally:
        hold.set()
        await provider.close()
    assert "run.completed" in [e.type for e in events]
    deltas = [e.payload.delta for e in events if isinstance(e.payload, ModelDelta)]
    # The rest came within one window, after the first: one more delta, and they add up.
    assert "".join(deltas) == answer
    assert len(deltas) == 2
