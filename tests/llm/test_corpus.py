"""The streams recorded from real providers (`../shared/provider-streams` beside the
repository, with its `manifest.json`), each read by the provider over real HTTP and checked
against what the manifest says a correct client assembles: text, reasoning, tool calls,
usage. Skipped where the recordings are not there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agency.contracts.events.base import ChatMessage
from agency.services.llm.provider import ModelRequest, ModelSettings, OpenAIProvider
from tests.llm.streams import ReplayServer

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "provider-streams"
MANIFEST = CORPUS / "manifest.json"


def _streams() -> dict[str, Any]:
    if not MANIFEST.exists():
        return {}
    streams: dict[str, Any] = json.loads(MANIFEST.read_text())["streams"]
    return streams


pytestmark = pytest.mark.skipif(not MANIFEST.exists(), reason=f"no recordings at {CORPUS}")


@pytest.mark.parametrize("name", sorted(_streams()) or ["none"])
async def test_a_recorded_stream_assembles_as_the_manifest_says(name: str) -> None:
    entry = _streams()[name]
    expected = entry["expected"]
    raw = (CORPUS / entry["file"]).read_bytes()
    request = ModelRequest(model="m", messages=(ChatMessage(role="user", content="hi"),))
    settings = ModelSettings(timeout=5, max_attempts=1)
    async with (
        ReplayServer([raw]) as server,
        OpenAIProvider(base_url=server.base_url, api_key="k", settings=settings) as provider,
    ):
        answer = await provider.complete(request)
    assert answer.message.content == expected["text"]
    assert len(answer.reasoning) == expected["reasoning_chars"]
    usage = expected["usage"] or {"prompt_tokens": 0, "completion_tokens": 0}
    assert answer.usage.input_tokens == usage["prompt_tokens"]
    assert answer.usage.output_tokens == usage["completion_tokens"]
    if expected["finish_reason"] is not None:
        assert answer.finish_reason == expected["finish_reason"]
    calls = answer.message.tool_calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        (c["name"], c["arguments"]) for c in expected["tool_calls"]
    ]
    for call, said in zip(calls, expected["tool_calls"], strict=True):
        assert call.id == said["id"] if said["id"] else call.id
    assert len({c.id for c in calls}) == len(calls)
