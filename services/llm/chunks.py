"""The fields of a streamed chat completion chunk that the assembly reads, as msgspec
structs: an event's JSON is decoded straight into these (`services/llm/wire.py`), where the
SDK's models cost a recursive construction per chunk (`docs/performance.md`). Unknown
fields are ignored; a wrong type raises `msgspec.ValidationError`, reported as
`not_openai_json`.

What OpenAI sends always is optional here where other servers leave it out: a tool call
fragment's `index` (Mistral, Gemini's and Ollama's OpenAI-compatible endpoints), a choice's
`index` and `delta`. A model's reasoning comes as `reasoning_content` (DeepSeek, Alibaba)
or `reasoning` (Groq, OpenRouter)."""

from __future__ import annotations

import msgspec


class FunctionDelta(msgspec.Struct, frozen=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, frozen=True):
    index: int | None = None
    id: str | None = None
    function: FunctionDelta | None = None


class Delta(msgspec.Struct, frozen=True):
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


_NO_DELTA = Delta()


class Choice(msgspec.Struct, frozen=True):
    index: int = 0
    delta: Delta = _NO_DELTA
    finish_reason: str | None = None


class ChunkUsage(msgspec.Struct, frozen=True):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class StreamChunk(msgspec.Struct, frozen=True):
    choices: list[Choice]
    model: str | None = None
    usage: ChunkUsage | None = None
