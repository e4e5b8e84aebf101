"""The fields of a streamed chat completion chunk that the assembly reads, as msgspec
structs: an event's JSON is decoded straight into these (`services/llm/wire.py`), where the
SDK's models cost a recursive construction per chunk (`docs/performance.md`). Unknown
fields are ignored; a missing required field or a wrong type raises
`msgspec.ValidationError`, reported as `not_openai_json`."""

from __future__ import annotations

import msgspec


class FunctionDelta(msgspec.Struct, frozen=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, frozen=True):
    index: int
    id: str | None = None
    function: FunctionDelta | None = None


class Delta(msgspec.Struct, frozen=True):
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class Choice(msgspec.Struct, frozen=True):
    index: int
    delta: Delta
    finish_reason: str | None = None


class ChunkUsage(msgspec.Struct, frozen=True):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class StreamChunk(msgspec.Struct, frozen=True):
    choices: list[Choice]
    model: str | None = None
    usage: ChunkUsage | None = None
