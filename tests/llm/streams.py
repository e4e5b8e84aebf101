"""The project's own chat completion streams, one per shape real OpenAI-compatible servers
send (`tests/llm/streams/*.sse`, written for these tests), with what each assembles to; an
SSE replay server that answers requests with them, in order, over real HTTP; and the
reading of a stream's bytes by the provider's own parser."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from agency.services.llm.assembly import Assembly, ModelResponse
from agency.services.llm.wire import EventLines, chunk_of

STREAMS = Path(__file__).parent / "streams"


@dataclass(frozen=True)
class Expected:
    """What a stream assembles to: text, reasoning, calls as (id or None when the client
    assigns it, name, arguments as JSON), usage (input, output) and finish_reason."""

    text: str = ""
    reasoning: str = ""
    calls: tuple[tuple[str | None, str, dict[str, object]], ...] = ()
    usage: tuple[int, int] = (0, 0)
    finish_reason: str = "stop"


SHAPES: dict[str, Expected] = {
    # OpenAI: content null, index on every fragment, usage in an empty-choices chunk.
    "indexed_tool": Expected(
        calls=(("call_first0001", "lookup", {"word": "oxbow"}),),
        usage=(41, 12),
        finish_reason="tool_calls",
    ),
    "indexed_parallel": Expected(
        calls=(
            ("call_pair0001", "lookup", {"word": "quill"}),
            ("call_pair0002", "lookup", {"word": "lantern"}),
        ),
        usage=(80, 30),
        finish_reason="tool_calls",
    ),
    "text_usage_only": Expected(text="An oxbow is a yoke.", usage=(70, 8)),
    # Ollama /v1: no index, role on every chunk, `stop` in a chunk of its own.
    "noindex_single": Expected(calls=(("call_loc4x9", "lookup", {"word": "anvil"}),)),
    "noindex_text": Expected(text="An anvil is for forging."),
    # Gemini: no index, `id: ""`, `stop` with the call, usage beside it.
    "noindex_empty_id_stop": Expected(
        calls=((None, "lookup", {"word": "trellis"}),), usage=(33, 6)
    ),
    "role_repeated_text": Expected(text="A trellis holds vines.", usage=(50, 5)),
    # Mistral: two calls in one chunk, neither with an index.
    "noindex_parallel_one_chunk": Expected(
        calls=(
            ("Ab3dE5gH7", "lookup", {"word": "kiln"}),
            ("Zy8xW6vU4", "lookup", {"word": "loom"}),
        ),
        usage=(90, 30),
        finish_reason="tool_calls",
    ),
    # OpenRouter (Kimi): id and name repeated on every fragment, no finish_reason at all.
    "no_finish_reason_tool": Expected(
        calls=(("0", "lookup", {"word": "sickle"}),), usage=(61, 14), finish_reason="tool_calls"
    ),
    # OpenRouter: text, then a call.
    "text_then_tool": Expected(
        text="Let me look that up.",
        calls=(("chatcmpl-tool-5a5a", "lookup", {"word": "plough"}),),
        usage=(120, 25),
        finish_reason="tool_calls",
    ),
    # OpenRouter: SSE comment lines, `reasoning`, usage in a chunk after the finish.
    "comments_reasoning_text": Expected(
        text="A plough turns the soil.", reasoning="A plough turns soil.", usage=(140, 20)
    ),
    # An Anthropic gateway: a call's index starts at 1, after text.
    "index_one_after_text": Expected(
        text="Checking now.",
        calls=(("toolu_test01", "lookup", {"word": "scythe"}),),
        finish_reason="tool_calls",
    ),
    # DeepSeek: `reasoning_content`, then a call.
    "reasoning_content_tool": Expected(
        reasoning="I should look it up.",
        calls=(("call_00_rEaSoNeR", "lookup", {"word": "harrow"}),),
        usage=(200, 40),
        finish_reason="tool_calls",
    ),
    # Groq: `reasoning`, the `x_groq` extension.
    "reasoning_text": Expected(
        text="A harrow breaks clods.", reasoning="The tool answered.", usage=(260, 15)
    ),
    # vLLM / Ollama parsers: every call under index 0, each with an id of its own.
    "repeated_index": Expected(
        calls=(
            ("call_ri_one", "lookup", {"word": "flail"}),
            ("call_ri_two", "lookup", {"word": "hoe"}),
        ),
        usage=(44, 21),
        finish_reason="tool_calls",
    ),
    # Two calls given one id: the second gets one of its own.
    "repeated_ids": Expected(
        calls=(("call_same", "lookup", {"word": "yoke"}), (None, "lookup", {"word": "rake"})),
        usage=(30, 10),
        finish_reason="tool_calls",
    ),
}


def stream(name: str) -> bytes:
    return (STREAMS / f"{name}.sse").read_bytes()


def assemble(raw: bytes, seed: str = "seed") -> ModelResponse:
    """A stream's bytes through the provider's parser and assembly, as `complete` reads
    them: events, chunks, `[DONE]`."""
    assembly = Assembly(model="m", max_bytes=1 << 20, seed=seed)
    done = False
    for name, data in EventLines().feed(raw):
        if data == b"[DONE]":
            done = True
            break
        assembly.add(chunk_of(name, data))
    return assembly.response(done=done)


def check(response: ModelResponse, expected: Expected) -> None:
    message = response.message
    assert message.content == expected.text
    assert response.reasoning == expected.reasoning
    assert (response.usage.input_tokens, response.usage.output_tokens) == expected.usage
    assert response.finish_reason == expected.finish_reason
    assert [(c.name, json.loads(c.arguments)) for c in message.tool_calls] == [
        (name, arguments) for _, name, arguments in expected.calls
    ]
    for call, (call_id, _, _) in zip(message.tool_calls, expected.calls, strict=True):
        assert call.id if call_id is None else call.id == call_id
    ids = [c.id for c in message.tool_calls]
    assert len(set(ids)) == len(ids), ids


@dataclass
class ReplayServer:
    """An OpenAI-compatible endpoint over real HTTP that answers each chat completion
    request with the next of `answers` (SSE bytes; once they are used up, `otherwise`),
    and keeps every request body and its `authorization` header. An answer of None drops
    the connection after the headers and half a stream. `delay` holds every answer that
    long; `most_at_once` counts the requests it held at once. With `only`, a request whose
    messages do not hold that text (a run of another test's, left on the shared broker and
    taken up by this server's runtime) is neither kept nor answered from `answers`: it gets
    `otherwise`."""

    answers: list[bytes | None]
    otherwise: bytes | None = None
    only: str | None = None
    delay: float = 0.0
    requests: list[dict[str, object]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    most_at_once: int = 0
    _held: int = 0
    _server: asyncio.Server | None = None
    _open: set[asyncio.StreamWriter] = field(default_factory=set)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length, key = 0, None
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                    if line.lower().startswith(b"authorization:"):
                        key = line.split(b":", 1)[1].strip().decode()
                body = await reader.readexactly(length)
                request = json.loads(body)
                if self._ours(request):
                    if key is not None:
                        self.keys.append(key)
                    self.requests.append(request)
                    answer = self.answers.pop(0) if self.answers else self.otherwise
                else:
                    answer = self.otherwise
                self._held += 1
                self.most_at_once = max(self.most_at_once, self._held)
                try:
                    await asyncio.sleep(self.delay)  # a slow model, not a synchronisation
                finally:
                    self._held -= 1
                status = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                if answer is None:
                    writer.write(status + b"content-length: 100000\r\n\r\ndata: {")
                    await writer.drain()
                    return
                writer.write(status + b"content-length: %d\r\n\r\n" % len(answer) + answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._open.discard(writer)
            writer.close()

    def _ours(self, request: dict[str, object]) -> bool:
        if self.only is None:
            return True
        return json.dumps(self.only)[1:-1] in json.dumps(request.get("messages", []))

    @property
    def base_url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        # A client's idle keep-alive connection holds wait_closed (Python 3.12 on) until it
        # ends: the server ends it, as one that shuts down does.
        for writer in self._open:
            writer.close()
        await asyncio.wait_for(self._server.wait_closed(), 5)
