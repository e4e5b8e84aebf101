"""The model port: what the runtime asks (`ModelRequest`), what it gets (`ModelResponse`),
the `Provider` protocol, and how a request is written in OpenAI's wire format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

from openai.types.chat import ChatCompletionMessageParam

from agency.contracts.events.base import ChatMessage, ContentPart
from agency.services.agents.tools import ToolSpec
from agency.services.llm.assembly import ModelResponse, OnDelta
from agency.services.llm.errors import ModelRequestError
from agency.services.llm.presets import PRESETS

# Prefixes naming an OpenAI-compatible provider (`services/llm/presets.py`); the adapter
# strips them.
KNOWN_PROVIDERS = frozenset(PRESETS)
# Prefixes that belong to the model name itself (OpenAI fine-tuned models: "ft:gpt-4o:org::id").
NAME_PREFIXES = frozenset({"ft"})


def split_model(model: str, known: frozenset[str] = KNOWN_PROVIDERS) -> tuple[str, str]:
    """("openai", "gpt-4.1-mini") for "openai:gpt-4.1-mini" or "gpt-4.1-mini";
    ("ollama", "qwen3:8b") for "ollama:qwen3:8b" (only the first colon splits).

    Raises `ModelRequestError` for a prefix not in `known`.
    """
    prefix, sep, rest = model.partition(":")
    if not sep or prefix in NAME_PREFIXES:
        name, provider = model, "openai"
    elif prefix in known:
        name, provider = rest, prefix
    else:
        names = ", ".join(sorted(known))
        raise ModelRequestError(
            f"unknown model provider {prefix!r} in model {model!r}: use one of {names} "
            f"(e.g. 'openai:gpt-4.1-mini') or a bare model name"
        )
    if not name:
        raise ModelRequestError(f"model {model!r} names no model after the provider prefix")
    return provider, name


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One chat completion request. `model` may carry a provider prefix ("openai:…");
    `tenant`, whose run asks (its own provider settings, if any, are used), and `agency`,
    the tenant's agency it runs in (whose spend budget it counts against)."""

    model: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    tenant: str = ""
    agency: str = ""


class Provider(Protocol):
    async def complete(
        self, request: ModelRequest, on_delta: OnDelta | None = None
    ) -> ModelResponse: ...


def content_part(part: ContentPart) -> dict[str, Any]:
    """A part of a message's content as OpenAI's chat API takes it."""
    if part.type == "text":
        return {"type": "text", "text": part.text}
    image: dict[str, str] = {"url": part.image_url()}
    if part.detail:
        image["detail"] = part.detail
    return {"type": "image_url", "image_url": image}


def message_param(message: ChatMessage) -> ChatCompletionMessageParam:
    match message.role:
        case "system" | "user":
            plain: dict[str, Any] = {"role": message.role, "content": message.content}
            if message.parts:
                plain["content"] = [content_part(p) for p in message.parts]
            if message.name:
                plain["name"] = message.name
            return cast(ChatCompletionMessageParam, plain)
        case "assistant":
            assistant: dict[str, Any] = {"role": "assistant"}
            # OpenAI accepts null content beside tool calls, but not an absent message body.
            if message.content or not message.tool_calls:
                assistant["content"] = message.content
            if message.tool_calls:
                assistant["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
            if message.name:
                assistant["name"] = message.name
            return cast(ChatCompletionMessageParam, assistant)
        case "tool":
            if not message.tool_call_id:
                raise ModelRequestError(
                    "a tool message has no tool_call_id: every tool result must name the "
                    "call it answers"
                )
            return {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": message.content,
            }
