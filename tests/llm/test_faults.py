"""The adapter against a misbehaving model: every fault ends as a `ModelError` with a kind,
retried only when transient, or is repaired where that is safe."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import msgspec
import pytest

from agency.contracts.events.base import ChatMessage
from agency.services.llm.errors import ModelErrorKind
from agency.services.llm.fake_scripts import Fault, ScriptStep, ScriptToolCall
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import (
    ModelError,
    ModelRequest,
    ModelSettings,
    ModelStreamError,
    OpenAIProvider,
)

SETTINGS = ModelSettings(timeout=1.0, max_attempts=3, backoff_initial=0.001, backoff_max=0.01)
CALLS = (ScriptToolCall(name="lookup", arguments={"word": "a"}), ScriptToolCall(name="noop"))


@pytest.fixture
async def provider(llm: FakeLLMServer) -> AsyncIterator[OpenAIProvider]:
    async with OpenAIProvider(base_url=llm.base_url, api_key="fake", settings=SETTINGS) as p:
        yield p


@pytest.fixture
def key() -> str:
    return f"fault-{uuid.uuid4().hex[:12]}"


def ask(key: str) -> ModelRequest:
    return ModelRequest(model="fake-model", messages=(ChatMessage(role="user", content=key),))


def attempts(llm: FakeLLMServer, key: str) -> int:
    return sum(1 for c in llm.calls if c.key == key)


@pytest.mark.parametrize(
    ("fault", "kind", "says", "tries"),
    [
        ("malformed_chunk", "malformed_response", "not JSON", 1),
        ("html", "malformed_response", "text/html", 1),
        ("not_openai_json", "not_openai_json", "not a chat completion", 1),
        ("hang", "timeout", "did not answer within 1.0s", 3),
        ("stall", "timeout", "did not answer within 1.0s", 3),
        ("truncated", "truncated_stream", "ended without a finish_reason", 3),
        ("disconnect", "truncated_stream", "broke off", 3),
    ],
)
async def test_a_fault_that_persists_is_a_model_error_with_its_kind(
    llm: FakeLLMServer,
    provider: OpenAIProvider,
    key: str,
    fault: Fault,
    kind: ModelErrorKind,
    says: str,
    tries: int,
) -> None:
    """Transient faults are retried up to max_attempts; the others are not retried at all."""
    llm.script(key, [ScriptStep(content="one two three", tool_calls=CALLS, fault=fault, times=99)])

    with pytest.raises(ModelError) as raised:
        await provider.complete(ask(key))

    assert raised.value.kind == kind
    assert says in str(raised.value)
    assert raised.value.retryable == (tries > 1)
    assert raised.value.attempts == tries == attempts(llm, key)


@pytest.mark.parametrize("fault", ["truncated", "disconnect", "stall"])
async def test_a_transient_stream_fault_once_is_retried_to_success(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str, fault: Fault
) -> None:
    llm.script(key, [ScriptStep(content="one two three four", fault=fault, fault_after=2)])

    response = await provider.complete(ask(key))

    assert response.message.content == "one two three four"
    assert [c.finished for c in llm.calls if c.key == key] == [False, True]


async def test_server_errors_are_http_5xx_and_bounded(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    llm.script(key, [ScriptStep(status=502, times=99)])

    with pytest.raises(ModelError) as raised:
        await provider.complete(ask(key))

    assert raised.value.kind == "http_5xx" and raised.value.status == 502
    assert "gave up after 3 attempts" in raised.value.__notes__
    assert attempts(llm, key) == 3


async def test_a_fault_after_streamed_text_is_partial_and_not_retried(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    """Retrying would hand the same text to on_delta twice: the caller re-runs the step."""
    content = " ".join(["word"] * 40)
    llm.script(
        key, [ScriptStep(content=content, fault="disconnect", fault_after=30, stream_delay_ms=5)]
    )
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    with pytest.raises(ModelStreamError) as raised:
        await provider.complete(ask(key), on_delta)

    assert raised.value.partial and raised.value.kind == "truncated_stream"
    assert seen and attempts(llm, key) == 1


@pytest.mark.parametrize("fault", ["missing_tool_call_ids", "duplicate_tool_call_ids"])
async def test_missing_or_repeated_tool_call_ids_are_filled_with_unique_ids(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str, fault: Fault
) -> None:
    """Each result must name its own call: a call without an id, or with an earlier call's,
    gets one derived from the request and its position (the same again for the same
    request)."""
    llm.script(key, [ScriptStep(tool_calls=CALLS, fault=fault, times=2), ScriptStep()])

    first = await provider.complete(ask(key))
    again = await provider.complete(ask(key))
    second = await provider.complete(ask(key))  # the fault was scripted twice: normal ids

    ids = [c.id for c in first.message.tool_calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)
    assert [c.id for c in again.message.tool_calls] == ids
    assert not set(ids[1:]) & {c.id for c in second.message.tool_calls}


async def test_invalid_tool_arguments_are_passed_on_as_written(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    """The runtime answers such a call with a tool error the model sees (tests/faults)."""
    llm.script(key, [ScriptStep(tool_calls=(ScriptToolCall(name="lookup", arguments='{"w'),))])

    response = await provider.complete(ask(key))

    assert response.message.tool_calls[0].arguments == '{"w'


async def test_a_huge_answer_arrives_in_bounded_deltas(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    llm.script(key, [ScriptStep(content="é" + "x" * 1023, repeat=3 * 1024)])
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    response = await provider.complete(ask(key), on_delta)

    assert len(response.message.content) == 3 * 1024 * 1024
    assert "".join(deltas) == response.message.content
    assert max(len(d.encode()) for d in deltas) <= SETTINGS.max_delta_bytes


async def test_an_answer_over_the_limit_is_abandoned(llm: FakeLLMServer, key: str) -> None:
    llm.script(key, [ScriptStep(content="x" * 1024, repeat=2048)])
    settings = msgspec.structs.replace(SETTINGS, max_answer_bytes=1024 * 1024)
    async with OpenAIProvider(base_url=llm.base_url, api_key="fake", settings=settings) as p:
        with pytest.raises(ModelError) as raised:
            await p.complete(ask(key))

    assert raised.value.kind == "answer_too_large" and not raised.value.retryable
    assert "1048576 bytes" in str(raised.value)


async def test_a_whole_completion_answering_a_stream_request_is_accepted(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    """Some OpenAI-compatible servers ignore `stream`; their answer is still an answer."""
    llm.script(key, [ScriptStep(content="whole", tool_calls=CALLS[:1], fault="unstreamed")])

    response = await provider.complete(ask(key))

    assert response.message.content == "whole"
    assert json.loads(response.message.tool_calls[0].arguments) == {"word": "a"}
    assert response.finish_reason == "tool_calls"


async def test_errors_raised_by_on_delta_pass_through_untranslated(
    llm: FakeLLMServer, provider: OpenAIProvider, key: str
) -> None:
    class Stop(Exception):
        pass

    llm.script(key, [ScriptStep(content="x" * 1024, repeat=200)])

    async def refuse(text: str) -> None:
        raise Stop(text[:10])

    with pytest.raises(Stop):
        await provider.complete(ask(key), refuse)


def test_settings_come_from_the_environment_and_bad_values_are_named() -> None:
    settings = ModelSettings.from_env(
        {"AGENCY_MODEL_TIMEOUT": "2.5", "AGENCY_MODEL_MAX_ATTEMPTS": "2"}
    )
    assert settings.timeout == 2.5 and settings.max_attempts == 2
    assert ModelSettings.from_env({"AGENCY_MODEL_IDLE_CONNECTIONS": "4"}).idle_connections == 4
    assert ModelSettings.from_env({}) == ModelSettings()
    with pytest.raises(ValueError, match="AGENCY_MODEL_TIMEOUT='soon' is not a valid float"):
        ModelSettings.from_env({"AGENCY_MODEL_TIMEOUT": "soon"})
    with pytest.raises(ValueError, match="max_attempts must be at least 1"):
        ModelSettings(max_attempts=0)


def test_script_steps_refuse_negative_timings() -> None:
    with pytest.raises(msgspec.ValidationError, match="must not be negative"):
        msgspec.convert({"jitter_ms": -1}, ScriptStep)
