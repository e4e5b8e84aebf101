"""The OpenAI adapter against the fake LLM server over real HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from agency.contracts.events.base import ChatMessage, ToolCall, Usage
from agency.services.agents.tools import ToolSpec
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall, text_chunks
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import (
    ModelConnectionError,
    ModelRequest,
    ModelRequestError,
    ModelSettings,
    ModelStatusError,
    ModelStreamError,
    OpenAIProvider,
    split_model,
)

WRITE_TODOS = ToolSpec(
    "write_todos",
    "Write the plan",
    {"type": "object", "properties": {"todos": {"type": "array"}}},
)
WRITE_FILE = ToolSpec(
    "write_file",
    "Write a file",
    {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}},
)


# Fast retries: the tests count attempts, not wait for them.
FAST = ModelSettings(timeout=10, backoff_initial=0.001, backoff_max=1.0)


@pytest.fixture
async def provider(llm: FakeLLMServer) -> AsyncIterator[OpenAIProvider]:
    async with OpenAIProvider(base_url=llm.base_url, api_key="fake", settings=FAST) as p:
        yield p


@pytest.fixture
def key() -> str:
    """A script key of this test's own, so tests share the server but not answers."""
    return f"case-{uuid.uuid4().hex[:12]}"


def ask(
    text: str, *, model: str = "openai:fake-model", tools: tuple[ToolSpec, ...] = ()
) -> ModelRequest:
    return ModelRequest(
        model=model, messages=(ChatMessage(role="user", content=text),), tools=tools
    )


def requests_for(llm: FakeLLMServer, key: str) -> list[dict[str, object]]:
    return [r for r in llm.requests if key in json.dumps(r)]


class Deltas:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.first = asyncio.Event()

    async def __call__(self, text: str) -> None:
        self.calls.append(text)
        self.first.set()


async def test_streamed_text_is_coalesced_into_few_deltas(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    """Many chunks reach on_delta as a few coalesced calls that add up to the content."""
    content = " ".join(f"word{i}" for i in range(80))
    llm.script(key, [ScriptStep(content=content, stream_delay_ms=3)])
    deltas = Deltas()

    response = await provider.complete(ask(f"talk {key}"), deltas)

    chunks = len(text_chunks(content))
    assert "".join(deltas.calls) == content == response.message.content
    assert 2 <= len(deltas.calls) <= chunks // 4
    assert response.finish_reason == "stop"
    assert response.message.role == "assistant" and response.message.tool_calls == ()


async def test_buffered_text_is_flushed_while_the_model_pauses(
    llm: FakeLLMServer, key: str
) -> None:
    """The first text goes at once; later text waits at most one coalescing interval, not
    until the next chunk arrives."""
    llm.script(key, [ScriptStep(content="a b c d e", stream_delay_ms=200)])
    deltas = Deltas()
    settings = ModelSettings(coalesce_ms=500)
    async with OpenAIProvider(base_url=llm.base_url, api_key="fake", settings=settings) as provider:
        await provider.complete(ask(f"pause {key}"), deltas)

    # a at once (0 ms), opening the first window: b, c go at 500 ms; d, e at the end.
    assert deltas.calls == ["a", " b c", " d e"]


async def test_the_first_text_goes_at_once_while_the_model_holds_the_rest(
    llm: FakeLLMServer, key: str
) -> None:
    """No window delays the first text: it is handed on before the second token exists."""
    llm.script(key, [ScriptStep(content="first then the rest")])
    hold = llm.hold(key)
    deltas = Deltas()
    settings = ModelSettings(coalesce_ms=600_000)
    async with OpenAIProvider(base_url=llm.base_url, api_key="fake", settings=settings) as provider:
        call = asyncio.ensure_future(provider.complete(ask(f"hold {key}"), deltas))
        try:
            await asyncio.wait_for(deltas.first.wait(), 10)
            assert deltas.calls == ["first"] and not call.done()
        finally:
            hold.set()
        response = await asyncio.wait_for(call, 10)
    assert deltas.calls == ["first", " then the rest"]
    assert response.message.content == "first then the rest"


async def test_an_answer_received_with_its_first_text_produces_no_delta(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    """The first text waits for the chunks already received, the stream's end among them:
    the text is in the response; the log is spared deltas that add nothing."""
    llm.script(key, [ScriptStep(content="quick answer")])
    deltas = Deltas()
    response = await provider.complete(ask(f"quick {key}"), deltas)
    assert deltas.calls == [] and response.message.content == "quick answer"


async def test_on_delta_errors_propagate_and_close_the_stream(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    llm.script(key, [ScriptStep(content=" ".join(["word"] * 30), stream_delay_ms=100)])

    class Stop(Exception):
        pass

    async def refuse(text: str) -> None:
        raise Stop(text)

    with pytest.raises(Stop):
        await asyncio.wait_for(provider.complete(ask(f"stop {key}"), refuse), timeout=2)
    assert len(requests_for(llm, key)) == 1
    again = await provider.complete(ask("still usable"))
    assert again.finish_reason == "stop"


async def test_tool_calls_are_assembled_from_fragments(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    calls = (
        ScriptToolCall(name="lookup", arguments={"q": "tea", "limit": 3}),
        ScriptToolCall(name="write_file", arguments='{"path": "a.md", "content": "x"}'),
    )
    plain = {"name": "noop", "arguments": {}}
    llm.script(key, [ScriptStep(content="Looking.", tool_calls=(*calls, plain))])  # type: ignore[arg-type]

    response = await provider.complete(ask(f"go {key}", tools=(WRITE_FILE,)))

    got = response.message.tool_calls
    assert [c.name for c in got] == ["lookup", "write_file", "noop"]
    assert [c.id[:9] for c in got] == ["call_0_0_", "call_0_1_", "call_0_2_"]
    assert got[0].id != got[1].id
    assert json.loads(got[0].arguments) == {"q": "tea", "limit": 3}
    assert json.loads(got[1].arguments) == {"path": "a.md", "content": "x"}
    assert response.message.content == "Looking."
    assert response.finish_reason == "tool_calls"


async def test_tools_are_sent_in_openai_function_format_and_omitted_when_none(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    await provider.complete(ask(f"with {key}", tools=(WRITE_FILE,)))
    await provider.complete(ask(f"without {key}"))

    with_tools, without_tools = requests_for(llm, key)
    assert with_tools["tools"] == [WRITE_FILE.as_openai()]
    assert "tools" not in without_tools
    assert with_tools["stream"] is True
    assert with_tools["stream_options"] == {"include_usage": True}


async def test_usage_comes_from_the_usage_chunk(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    llm.script(key, [ScriptStep(content="hi", usage=Usage(input_tokens=7, output_tokens=11))])

    response = await provider.complete(ask(f"count {key}"))

    assert response.usage == Usage(input_tokens=7, output_tokens=11)


async def test_usage_is_estimated_as_chars_over_four(provider: OpenAIProvider) -> None:
    response = await provider.complete(ask("x" * 41))

    assert response.usage.input_tokens == 11
    assert response.usage.output_tokens == -(-len(response.message.content) // 4)


@pytest.mark.parametrize("status", [500, 429, 408], ids=["server-error", "rate-limited", "timeout"])
async def test_transient_status_is_retried_until_success(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str, status: int
) -> None:
    llm.script(key, [ScriptStep(content="made it", status=status, times=2)])

    response = await provider.complete(ask(f"retry {key}"))

    assert response.message.content == "made it"
    assert len(requests_for(llm, key)) == 3


async def test_retry_after_header_is_honoured(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    llm.script(key, [ScriptStep(content="ok", status=429, retry_after_ms=300)])

    started = time.monotonic()
    await provider.complete(ask(f"slow down {key}"))

    assert time.monotonic() - started >= 0.3


async def test_retries_are_bounded(llm: FakeLLMServer, key: str) -> None:
    llm.script(key, [ScriptStep(status=503, times=100)])
    settings = msgspec.structs.replace(FAST, max_attempts=3)
    async with OpenAIProvider(base_url=llm.base_url, api_key="fake", settings=settings) as provider:
        with pytest.raises(ModelStatusError) as raised:
            await provider.complete(ask(f"down {key}"))

    assert raised.value.retryable and raised.value.status == 503
    assert raised.value.attempts == 3
    assert len(requests_for(llm, key)) == 3


async def test_bad_request_is_not_retried(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    llm.script(key, [ScriptStep(status=400, times=100)])

    with pytest.raises(ModelStatusError) as raised:
        await provider.complete(ask(f"bad {key}"))

    assert not raised.value.retryable and raised.value.status == 400
    assert "HTTP 400" in str(raised.value)
    assert len(requests_for(llm, key)) == 1


async def test_unreachable_provider_is_a_retryable_connection_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = msgspec.structs.replace(FAST, max_attempts=2)
    async with OpenAIProvider(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="fake", settings=settings
    ) as provider:
        with pytest.raises(ModelConnectionError) as raised:
            await provider.complete(ask("anyone?"))

    assert raised.value.retryable and raised.value.attempts == 2
    assert f"127.0.0.1:{port}" in str(raised.value)


async def test_stream_broken_before_any_delta_is_retried(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    llm.script(key, [ScriptStep(content="one two three four", stream_error_after=2)])

    response = await provider.complete(ask(f"flaky {key}"))

    assert response.message.content == "one two three four"
    assert len(requests_for(llm, key)) == 2


async def test_stream_broken_after_delivered_text_is_raised_not_retried(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    """Retrying would report the delivered text twice, so the caller re-runs the step."""
    llm.script(
        key, [ScriptStep(content="one two three four", stream_error_after=3, stream_delay_ms=100)]
    )
    deltas = Deltas()

    with pytest.raises(ModelStreamError) as raised:
        await provider.complete(ask(f"flaky {key}"), deltas)

    assert raised.value.retryable and raised.value.partial
    assert deltas.calls
    assert len(requests_for(llm, key)) == 1


@pytest.mark.parametrize(
    "step",
    [
        ScriptStep(content=" ".join(["slow"] * 50), stream_delay_ms=5_000),
        ScriptStep(content="late", delay_ms=5_000),
    ],
    ids=["mid-stream", "before-headers"],
)
async def test_cancellation_aborts_the_call_promptly(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str, step: ScriptStep
) -> None:
    llm.script(key, [step])
    deltas = Deltas()
    task = asyncio.create_task(provider.complete(ask(f"cancel {key}"), deltas))
    if step.stream_delay_ms:
        await asyncio.wait_for(deltas.first.wait(), timeout=5)
    else:
        await asyncio.sleep(0.1)  # let the request reach the server's delay

    task.cancel()
    done, _ = await asyncio.wait((task,), timeout=1.0)

    assert task in done and task.cancelled()
    again = await provider.complete(ask("still usable"))
    assert again.finish_reason == "stop"


async def test_demo_agent_plans_writes_notes_then_answers(provider: OpenAIProvider) -> None:
    request = "Compare three tea varieties for a beginner"
    messages: list[ChatMessage] = [ChatMessage(role="user", content=request)]
    names = []
    for _ in range(3):
        response = await provider.complete(
            ModelRequest(
                model="fake-model", messages=tuple(messages), tools=(WRITE_TODOS, WRITE_FILE)
            )
        )
        messages.append(response.message)
        names.append([c.name for c in response.message.tool_calls])
        messages.extend(
            ChatMessage(role="tool", tool_call_id=c.id, content="ok")
            for c in response.message.tool_calls
        )

    assert names == [["write_todos"], ["write_file"], []]
    todos = json.loads(messages[1].tool_calls[0].arguments)["todos"]
    assert 2 <= len(todos) <= 3 and request in todos[0]["content"]
    assert json.loads(messages[3].tool_calls[0].arguments)["path"] == "notes.md"
    assert request in messages[-1].content
    assert messages[-1].content.startswith("Done.")


async def test_same_request_gives_the_same_answer(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    """Re-running a step yields identical content and tool call ids."""
    llm.script(key, [ScriptStep(content="plan", tool_calls=(ScriptToolCall(name="write_todos"),))])
    first = await provider.complete(ask(f"again {key}", tools=(WRITE_TODOS,)))
    second = await provider.complete(ask(f"again {key}", tools=(WRITE_TODOS,)))
    demo_first = await provider.complete(ask("demo", tools=(WRITE_TODOS,)))
    demo_second = await provider.complete(ask("demo", tools=(WRITE_TODOS,)))

    assert first == second
    assert demo_first == demo_second
    assert first.message.tool_calls[0].id != demo_first.message.tool_calls[0].id


async def test_steps_follow_the_assistant_messages_and_end_with_done(
    provider: OpenAIProvider, llm: FakeLLMServer, key: str
) -> None:
    llm.script(key, [ScriptStep(content="first"), ScriptStep(content="second")])
    history: tuple[ChatMessage, ...] = (ChatMessage(role="user", content=key),)
    answers = []
    for _ in range(3):
        response = await provider.complete(ModelRequest(model="fake-model", messages=history))
        answers.append(response.message.content)
        history = (*history, response.message, ChatMessage(role="user", content="go on"))

    assert answers == ["first", "second", "done"]


@pytest.mark.parametrize(
    ("model", "sent"),
    [
        ("openai:gpt-4.1-mini", "gpt-4.1-mini"),
        ("gpt-4.1-mini", "gpt-4.1-mini"),
        ("ft:gpt-4o-mini:acme::abc123", "ft:gpt-4o-mini:acme::abc123"),
    ],
    ids=["prefixed", "bare", "fine-tuned"],
)
async def test_model_prefix_is_stripped(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str, model: str, sent: str
) -> None:
    response = await provider.complete(ask(key, model=model))

    assert requests_for(llm, key)[0]["model"] == sent
    assert response.model == sent


@pytest.mark.parametrize("model", ["acme:gpt-4.1-mini", "openai:"], ids=["unknown", "empty"])
async def test_bad_model_names_fail_before_sending(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str, model: str
) -> None:
    with pytest.raises(ModelRequestError) as raised:
        await provider.complete(ask(key, model=model))

    assert not raised.value.retryable
    assert requests_for(llm, key) == []
    with pytest.raises(ModelRequestError, match="unknown model provider 'acme'"):
        split_model("acme:x")


async def test_conversation_openai_would_refuse_is_a_400(provider: OpenAIProvider) -> None:
    """The fake checks tool results answer earlier calls, as OpenAI does."""
    call = ToolCall(id="call_x", name="write_file")
    messages = (
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="user", content="no tool result in between"),
    )

    with pytest.raises(ModelStatusError) as raised:
        await provider.complete(ModelRequest(model="fake-model", messages=messages))

    assert raised.value.status == 400 and "call_x" in str(raised.value)


async def test_scripts_can_be_set_over_http_and_answer_without_streaming(
    llm: FakeLLMServer, key: str
) -> None:
    root = llm.base_url.removesuffix("/v1")
    step = {"content": "hello", "tool_calls": [{"name": "f", "arguments": {"a": 1}}]}
    body = {"model": "m", "messages": [{"role": "user", "content": key}]}
    async with httpx.AsyncClient(timeout=5) as http:
        assert (
            await http.post(f"{root}/_scripts", json={"key": key, "steps": [step]})
        ).status_code == 204
        answer = (await http.post(f"{llm.base_url}/chat/completions", json=body)).json()
        assert (await http.delete(f"{root}/_scripts", params={"key": key})).status_code == 204
        after = (await http.post(f"{llm.base_url}/chat/completions", json=body)).json()
        models = (await http.get(f"{llm.base_url}/models")).json()
        refused = await http.post(f"{root}/_scripts", json={"key": "", "steps": []})

    message = answer["choices"][0]["message"]
    assert answer["object"] == "chat.completion"
    assert message["content"] == "hello"
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert answer["choices"][0]["finish_reason"] == "tool_calls"
    assert after["choices"][0]["message"]["content"].startswith("Done.")
    assert "fake-model" in [m["id"] for m in models["data"]]
    assert refused.status_code == 400 and "key" in refused.json()["error"]["message"]


@pytest.mark.parametrize(("idle", "reused"), [(2, 2), (ModelSettings().idle_connections, 6)])
async def test_connections_beyond_the_idle_limit_are_closed_after_a_burst(
    llm: FakeLLMServer, key: str, idle: int, reused: int
) -> None:
    # Six calls at once hold six connections; afterwards `idle_connections` of them are
    # kept for the next calls and the rest closed (each idle one costs every later call a
    # look at its socket).
    llm.script(key, [ScriptStep(content="ok", delay_ms=300)])
    settings = ModelSettings(timeout=10, idle_connections=idle)
    async with OpenAIProvider(base_url=llm.base_url, api_key="fake", settings=settings) as p:

        async def burst() -> set[int | None]:
            before = len(llm.calls)
            await asyncio.gather(*(p.complete(ask(key)) for _ in range(6)))
            return {c.client_port for c in llm.calls[before:] if c.key == key}

        first = await burst()
        second = await burst()
    assert len(first) == len(second) == 6
    assert len(first & second) == reused
