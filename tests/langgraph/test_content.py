"""Messages with images through the SDK: they reach the model as OpenAI's multimodal parts,
stay on the log and read back as the client wrote them; bad or oversized parts are 4xx."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import APIStatusError, BadRequestError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import collect

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(64)).decode()
DATA_URL = f"data:image/png;base64,{PNG}"


def _asked(key: str, *images: dict[str, Any]) -> dict[str, Any]:
    content = [{"type": "text", "text": f"what is in these? {key}"}, *images]
    return {"messages": [{"type": "human", "content": content}]}


def _sent_parts(lg: LangGraph, key: str) -> list[dict[str, Any]]:
    """The content parts of the user message the model was last asked with, about `key`."""
    for body in reversed(lg.llm.requests):
        for message in body["messages"]:
            content = message.get("content")
            if message["role"] == "user" and isinstance(content, list) and key in str(content):
                return list(content)
    raise AssertionError(f"no request with content parts mentions {key}")


async def test_images_reach_the_model_as_image_url_parts(lg: LangGraph) -> None:
    key = "lg-image-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="a cat and a dog")])
    images = (
        {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}},
        {"type": "image", "base64": PNG, "mime_type": "image/png"},
        {"type": "image", "source_type": "url", "url": "https://example.com/dog.jpg"},
    )
    thread = await lg.client.threads.create(graph_id="worker")
    await lg.client.runs.wait(thread["thread_id"], "worker", input=_asked(key, *images))
    assert _sent_parts(lg, key) == [
        {"type": "text", "text": f"what is in these? {key}"},
        {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}},
        {"type": "image_url", "image_url": {"url": DATA_URL}},
        {"type": "image_url", "image_url": {"url": "https://example.com/dog.jpg"}},
    ]


async def test_images_read_back_as_sent_in_state_history_and_stream(lg: LangGraph) -> None:
    key = "lg-image-back-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="a small square")])
    images = (
        {"type": "image_url", "image_url": {"url": DATA_URL}},
        {"type": "image", "source_type": "base64", "data": PNG, "mime_type": "image/png"},
    )
    asked = _asked(key, *images)
    sent = asked["messages"][0]["content"]
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    parts = await collect(lg.client.runs.stream(thread, "worker", input=asked))
    streamed = [p.data for p in parts if p.event == "values"][-1]["messages"]
    assert streamed[0]["content"] == sent
    state = await lg.client.threads.get_state(thread)
    assert [m["content"] for m in state["values"]["messages"]] == [sent, "a small square"]
    history = await lg.client.threads.get_history(thread)
    assert all(s["values"]["messages"][0]["content"] == sent for s in history)


@pytest.mark.parametrize(
    ("part", "named"),
    [
        ({"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}, "is neither http"),
        ({"type": "image", "base64": PNG}, "mime_type"),
        ({"type": "image", "base64": "not base64!", "mime_type": "image/png"}, "base64"),
        ({"type": "audio", "data": "x"}, "'audio'"),
    ],
    ids=["url-scheme", "no-mime-type", "not-base64", "unknown-type"],
)
async def test_a_bad_content_part_is_400_naming_it(
    lg: LangGraph, part: dict[str, Any], named: str
) -> None:
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    with pytest.raises(BadRequestError, match=named):
        await lg.client.runs.create(thread, "worker", input=_asked("x", part))


async def test_images_in_an_ai_message_are_400(lg: LangGraph) -> None:
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    image = {"type": "image_url", "image_url": {"url": DATA_URL}}
    messages = [{"type": "ai", "content": [image]}, {"type": "human", "content": "hi"}]
    with pytest.raises(BadRequestError, match="human messages only"):
        await lg.client.runs.create(thread, "worker", input={"messages": messages})


async def test_oversized_images_are_refused_with_the_limit(lg: LangGraph) -> None:
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    big = "A" * (600 * 1024)
    part = {"type": "image", "base64": big, "mime_type": "image/png"}
    with pytest.raises(BadRequestError, match="more than 524288"):
        await lg.client.runs.create(thread, "worker", input=_asked("x", part))
    huge = {"type": "image", "base64": big * 2, "mime_type": "image/png"}
    with pytest.raises(APIStatusError) as raised:
        await lg.client.runs.create(thread, "worker", input=_asked("x", huge))
    assert raised.value.status_code == 413


async def test_agencys_own_state_carries_the_parts_of_a_message_with_images(lg: LangGraph) -> None:
    """`GET /agency/{agencyId}/agent/{threadId}/state` (camelCase): the read model's message
    keeps its parts beside its text."""
    key = "lg-image-own-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="a square")])
    images = (
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"}},
        {"type": "image", "source_type": "base64", "data": PNG, "mime_type": "image/png"},
    )
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    await lg.client.runs.wait(thread, "worker", input=_asked(key, *images))
    headers = {"Authorization": f"Bearer {lg.key}"}
    async with httpx.AsyncClient(base_url=lg.url, headers=headers, timeout=20) as http:
        answer = await http.get(f"/agency/{lg.agency}/agent/{thread}/state")
    assert answer.status_code == 200, answer.text
    asked, said = answer.json()["state"]["messages"]
    assert asked["content"] == f"what is in these? {key}"
    assert asked["parts"] == [
        {"type": "text", "text": f"what is in these? {key}"},
        {"type": "image_url", "url": "https://example.com/cat.jpg", "detail": "low"},
        {"type": "image", "data": PNG, "sourceType": "base64", "mimeType": "image/png"},
    ]
    assert said == {"role": "assistant", "content": "a square"}
