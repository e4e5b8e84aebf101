"""What the fake LLM sends, as OpenAI sends it: completions, stream chunks, error bodies,
and the ways a misbehaving server breaks them (`fake_scripts.Fault`)."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from litestar import Response

from agency.contracts.events.base import Usage
from agency.services.llm.fake_scripts import Reply, argument_fragments, text_chunks

CREATED = 1_700_000_000  # a fixed timestamp keeps answers byte-for-byte deterministic


class OutFunction(msgspec.Struct, omit_defaults=True):
    name: str | None = None
    arguments: str = ""


class OutToolCall(msgspec.Struct, omit_defaults=True):
    function: OutFunction
    index: int | None = None
    id: str | None = None
    type: str | None = None


class OutDelta(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[OutToolCall] | None = None


class OutChunkChoice(msgspec.Struct):
    index: int
    delta: OutDelta
    finish_reason: str | None = None


class OutUsage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, usage: Usage) -> OutUsage:
        total = usage.input_tokens + usage.output_tokens
        return cls(usage.input_tokens, usage.output_tokens, total)


class OutChunk(msgspec.Struct, omit_defaults=True):
    id: str
    model: str
    choices: list[OutChunkChoice]
    object: str = "chat.completion.chunk"
    created: int = CREATED
    usage: OutUsage | None = None


class OutMessage(msgspec.Struct):
    role: str
    content: str | None
    tool_calls: list[OutToolCall] | None = None
    reasoning_content: str | None = None


class OutChoice(msgspec.Struct):
    index: int
    message: OutMessage
    finish_reason: str


class OutCompletion(msgspec.Struct):
    id: str
    model: str
    choices: list[OutChoice]
    usage: OutUsage
    object: str = "chat.completion"
    created: int = CREATED


class OutModel(msgspec.Struct):
    id: str
    object: str = "model"
    created: int = CREATED
    owned_by: str = "fake"


class OutModelList(msgspec.Struct):
    data: list[OutModel]
    object: str = "list"


class OutErrorBody(msgspec.Struct):
    message: str
    type: str
    code: str | None = None


class OutError(msgspec.Struct):
    error: OutErrorBody


# Sleeps for the given seconds; true if the client went away meanwhile.

encode = msgspec.json.Encoder().encode


def error_response(
    status: int, message: str, headers: Mapping[str, str] | None = None
) -> Response[bytes]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = OutError(OutErrorBody(message=message, type=kind, code=str(status)))
    return Response(
        encode(body), status_code=status, media_type="application/json", headers=headers
    )


def sse(value: msgspec.Struct) -> bytes:
    return b"data: " + encode(value) + b"\n\n"


def completion(reply: Reply, model: str) -> OutCompletion:
    calls = [
        OutToolCall(
            id=c.id or None,
            type="function",
            function=OutFunction(name=c.name, arguments=c.arguments),
        )
        for c in reply.tool_calls
    ]
    message = OutMessage(
        role="assistant",
        content=reply.content if reply.content or not calls else None,
        tool_calls=calls or None,
        reasoning_content=reply.reasoning or None,
    )
    return OutCompletion(
        id=reply.id,
        model=model,
        choices=[OutChoice(index=0, message=message, finish_reason=reply.finish_reason)],
        usage=OutUsage.of(reply.usage),
    )


def stream_chunks(reply: Reply, model: str, include_usage: bool) -> tuple[list[bytes], list[bytes]]:
    """The SSE events of a streamed answer, as OpenAI sends them: (tokens, closing)."""

    def chunk(delta: OutDelta, finish_reason: str | None = None) -> bytes:
        choice = OutChunkChoice(index=0, delta=delta, finish_reason=finish_reason)
        return sse(OutChunk(id=reply.id, model=model, choices=[choice]))

    events = [chunk(OutDelta(role="assistant", content=""))]
    events.extend(chunk(OutDelta(reasoning_content=r)) for r in text_chunks(reply.reasoning))
    events.extend(chunk(OutDelta(content=piece)) for piece in text_chunks(reply.content))
    for index, call in enumerate(reply.tool_calls):
        head = OutToolCall(
            index=index, id=call.id or None, type="function", function=OutFunction(name=call.name)
        )
        events.append(chunk(OutDelta(tool_calls=[head])))
        events.extend(
            chunk(
                OutDelta(tool_calls=[OutToolCall(index=index, function=OutFunction(arguments=a))])
            )
            for a in argument_fragments(call.arguments)
        )
    closing = [chunk(OutDelta(), reply.finish_reason)]
    if include_usage:
        closing.append(
            sse(OutChunk(id=reply.id, model=model, choices=[], usage=OutUsage.of(reply.usage)))
        )
    closing.append(DONE)
    return events, closing


DONE = b"data: [DONE]\n\n"
# A chunk cut off mid-JSON, as a broken proxy or server might send it.
MALFORMED_CHUNK = b'data: {"id": "chatcmpl-broken", "choices": [{"index": 0, "delta": {"con\n\n'
HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>"
    b"<body><h1>Bad Gateway</h1><p>The upstream server is unavailable.</p></body></html>\n"
)
# Valid JSON, but no chat completion: what a misrouted request to another API gets back.
FOREIGN_JSON = b'{"status": "ok", "result": {"text": "hello"}, "version": 2}'
