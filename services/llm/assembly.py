"""From what a provider sent to one assistant message: stream chunks folded together (or a
whole completion from a server that does not stream), checked on the way, and streamed text
handed on in coalesced pieces.

What is checked, and what becomes of it:
- a chunk that is not JSON: `malformed_response`; JSON that is no chat completion chunk:
  `not_openai_json` (neither is retried: the provider is answering something else);
- a stream that ends with neither a finish_reason nor `[DONE]`: `truncated_stream`
  (retried); one that ends with `[DONE]` but no finish_reason is whole (some servers
  send none);
- more than `max_answer_bytes` of text, reasoning and arguments: `answer_too_large`;
- tool calls: fragments are joined by their `index` (a new id under a known index is a
  new call), or by their place when a server sends none; a call without a name is
  `invalid_tool_call`; a call without an id, or with the id of an earlier call of the
  answer, gets one derived from the request and its position (each result must name its
  own call). Arguments are passed on as the model wrote them: arguments that are not a
  JSON object are answered by the runtime or the tools service with a tool error the
  model sees, so it can correct itself;
- reasoning (`reasoning_content`, `reasoning`) is kept apart from the answer's text.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import msgspec
import pydantic
from openai.types.chat import ChatCompletion

from agency.contracts.events.base import ChatMessage, ToolCall, Usage
from agency.contracts.events.model import ModelCompleted
from agency.contracts.ids import derived_id
from agency.services.llm.chunks import StreamChunk, ToolCallDelta
from agency.services.llm.errors import ModelResponseError, ModelStreamError

OnDelta = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ModelResponse:
    message: ChatMessage
    usage: Usage
    finish_reason: str
    model: str
    # USD, from the provider's price table; recorded in `model.completed`.
    cost_usd: float = 0.0
    # What the model reasoned before answering (`reasoning_content` or `reasoning`): kept
    # apart from the answer's text and never sent back to the model.
    reasoning: str = ""


def recorded_response(done: ModelCompleted) -> ModelResponse:
    """The answer a `model.completed` event records, as the provider gave it."""
    return msgspec.convert(done, ModelResponse, from_attributes=True)


class CallerError(Exception):
    """An exception raised by the caller's `on_delta`, carried through the adapter untouched
    (the adapter translates everything else into `ModelError`)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Assembly:
    """Folds stream chunks into one assistant message. `seed` names the request (its
    body, digested only when a call needs an id): the ids given to calls that came without
    one derive from it and the call's position, so the same request assembles the same
    ids."""

    model: str
    max_bytes: int
    seed: str | bytes = ""
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    # Calls in the order they first appeared; `by_index` finds a call by its `index`.
    calls: list[_PartialCall] = field(default_factory=list)
    by_index: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    size: int = 0

    def add(self, chunk: StreamChunk) -> str:
        """Fold one chunk in (decoded and checked by `services/llm/wire.py`); return its
        new text."""
        if chunk.model:
            self.model = chunk.model
        if chunk.usage is not None:
            self.usage = Usage(
                input_tokens=chunk.usage.prompt_tokens or 0,
                output_tokens=chunk.usage.completion_tokens or 0,
            )
        new_text = ""
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                new_text += delta.content
                self._grow(delta.content)
            thought = delta.reasoning_content or delta.reasoning
            if thought:
                self.reasoning.append(thought)
                self._grow(thought)
            for fragment in delta.tool_calls or ():
                self._fold_call(fragment)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        if new_text:
            self.text.append(new_text)
        return new_text

    def _fold_call(self, fragment: ToolCallDelta) -> None:
        call = self._call_for(fragment)
        # Servers differ in whether they repeat id/name on later fragments: first wins.
        if fragment.id and not call.id:
            call.id = fragment.id
        if fragment.function is not None:
            if fragment.function.name and not call.name:
                call.name = fragment.function.name
            if fragment.function.arguments:
                call.arguments.append(fragment.function.arguments)
                self._grow(fragment.function.arguments)

    def _call_for(self, fragment: ToolCallDelta) -> _PartialCall:
        """The call a fragment belongs to: by its `index` when it has one (any numbers,
        repeated on every fragment of a call), unless it brings another id than that
        call's (some parsers put every call under index 0); without one (Mistral, Gemini,
        Ollama), the call with its id, else a new call when it names an id or a function
        (several may come in one chunk), else the call before it."""
        if fragment.index is not None:
            call = self.by_index.get(fragment.index)
            if call is None or (fragment.id and call.id and fragment.id != call.id):
                call = self.by_index[fragment.index] = self._new_call()
            return call
        if fragment.id:
            for known in self.calls:
                if known.id == fragment.id:
                    return known
        starts = bool(fragment.id) or (fragment.function is not None and fragment.function.name)
        if starts or not self.calls:
            return self._new_call()
        return self.calls[-1]

    def _new_call(self) -> _PartialCall:
        call = _PartialCall()
        self.calls.append(call)
        return call

    def _grow(self, piece: str) -> None:
        self.size += len(piece.encode())
        if self.size > self.max_bytes:
            raise ModelResponseError(
                f"the model's answer exceeds {self.max_bytes} bytes of text and tool arguments "
                "(AGENCY_MODEL_MAX_ANSWER_BYTES); it was abandoned",
                kind="answer_too_large",
            )

    def response(self, *, done: bool = False) -> ModelResponse:
        """The answer once the stream ended; `done` says it ended with `[DONE]`. An answer
        without a finish_reason was cut off, unless `[DONE]` ended it (OpenRouter's Kimi
        sends none): its finish_reason is then what its content says."""
        finish_reason = self.finish_reason
        if finish_reason is None:
            if not done:
                raise ModelStreamError(
                    "the model stream ended without a finish_reason: the answer was cut off "
                    f"after {self.size} bytes",
                    kind="truncated_stream",
                )
            finish_reason = "tool_calls" if self.calls else "stop"
        calls = checked_calls(
            ((p.id, p.name, "".join(p.arguments) or "{}") for p in self.calls), self.seed
        )
        message = ChatMessage(role="assistant", content="".join(self.text), tool_calls=calls)
        return ModelResponse(
            message=message,
            usage=self.usage,
            finish_reason=finish_reason,
            model=self.model,
            reasoning="".join(self.reasoning),
        )


def checked_calls(
    calls: Iterable[tuple[str, str, str]], seed: str | bytes = ""
) -> tuple[ToolCall, ...]:
    """(id, name, arguments) as tool calls, nameless ones refused. A call without an id, or
    with the id of a call before it, is given one derived from `seed` and its position:
    each result must name its own call, and the same request gets the same ids again
    (a step run again, a re-execution)."""
    listed = list(calls)
    for index, (_, name, _) in enumerate(listed):
        if not name:
            raise ModelResponseError(
                f"the model's tool call {index} has no function name", kind="invalid_tool_call"
            )
    seen: set[str] = set()
    made: list[ToolCall] = []
    for position, (call_id, name, arguments) in enumerate(listed):
        if not call_id or call_id in seen:
            if isinstance(seed, bytes):
                seed = hashlib.sha256(seed).hexdigest()
            call_id = derived_id("call_", seed, str(position))
        seen.add(call_id)
        made.append(ToolCall(id=call_id, name=name, arguments=arguments))
    return tuple(made)


def parse_completion(
    body: bytes, model: str, max_bytes: int, seed: str | bytes = ""
) -> ModelResponse:
    """A whole chat completion (a server that ignored `stream`), or the reason it is none."""
    if len(body) > max_bytes:
        raise ModelResponseError(
            f"the model's answer exceeds {max_bytes} bytes (AGENCY_MODEL_MAX_ANSWER_BYTES)",
            kind="answer_too_large",
        )
    try:
        completion = ChatCompletion.model_validate_json(body)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        if first["type"] == "json_invalid":
            raise ModelResponseError(
                f"the model provider answered HTTP 200 with a body that is not JSON: "
                f"{snippet(body.decode(errors='replace'))}",
                kind="malformed_response",
            ) from e
        where = ".".join(str(p) for p in first["loc"]) or "the body"
        raise ModelResponseError(
            f"the model provider answered HTTP 200 with JSON that is not a chat completion "
            f"({where}: {first['msg']}): {snippet(body.decode(errors='replace'))}",
            kind="not_openai_json",
        ) from e
    if not completion.choices:
        raise ModelResponseError(
            "the model provider answered a chat completion without choices",
            kind="not_openai_json",
        )
    choice = completion.choices[0]
    message = choice.message
    calls = checked_calls(
        (
            (c.id, c.function.name, c.function.arguments or "{}")
            for c in message.tool_calls or ()
            if c.type == "function"
        ),
        seed,
    )
    usage = Usage()
    if completion.usage is not None:
        usage = Usage(
            input_tokens=completion.usage.prompt_tokens,
            output_tokens=completion.usage.completion_tokens,
        )
    return ModelResponse(
        message=ChatMessage(role="assistant", content=message.content or "", tool_calls=calls),
        usage=usage,
        finish_reason=choice.finish_reason or "stop",
        model=completion.model or model,
    )


def snippet(text: str, limit: int = 200) -> str:
    """The start of a body, on one line, for an error message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def split_utf8(text: str, limit: int) -> list[str]:
    """Pieces of `text` of at most `limit` bytes of UTF-8 each, never cutting a character."""
    data = text.encode()
    if len(data) <= limit:
        return [text]
    pieces = []
    start = 0
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and end > start + 1 and (data[end] & 0xC0) == 0x80:
            end -= 1  # a continuation byte: the character starts earlier
        pieces.append(data[start:end].decode())
        start = end
    return pieces


class Coalescer:
    """Hands streamed text to `on_delta` in order, in pieces of at most `max_bytes`: the
    answer's first text at once, the rest at most once per interval.

    The first text waits for no window, only for the chunks already received (the reader
    takes those first, `wait_budget` being 0): a person sees the answer begin as soon as
    the model begins it. An answer that arrived whole with its first text produces no
    delta at all: `model.completed` carries its text, and the log is spared two appends
    per fast model call. Once a delta went out, the rest follows, so the deltas of a call
    always add up to its whole text.
    """

    def __init__(self, on_delta: OnDelta | None, interval: float, max_bytes: int) -> None:
        self._on_delta = on_delta
        self._interval = interval
        self._max_bytes = max_bytes
        self._buffer: list[str] = []
        self._buffered = 0
        self._last = -math.inf
        self.delivered = False

    def add(self, text: str) -> None:
        if self._on_delta is not None and text:
            if self._last == -math.inf:
                self._last = time.monotonic()
            self._buffer.append(text)
            self._buffered += len(text)

    async def finish(self) -> None:
        if self.delivered:
            await self.flush()
        self._buffer.clear()
        self._buffered = 0

    def wait_budget(self) -> float | None:
        """How long the next read may block before buffered text is due (None: no limit)."""
        if not self._buffer:
            return None
        if self._buffered >= self._max_bytes or not self.delivered:
            return 0.0  # a full piece, or the answer's first text, waits for no window
        return max(0.0, self._last + self._interval - time.monotonic())

    def overdue(self) -> bool:
        """Whether the buffered text is due now: it fills a piece, or a delta went out
        and its window is over. The first text is due once no further chunk is ready
        (`wait_budget`), which the reader finds out."""
        if self._buffered >= self._max_bytes:
            return True
        return self.delivered and self.wait_budget() == 0.0

    async def flush(self) -> None:
        if not self._buffer or self._on_delta is None:
            return
        text = "".join(self._buffer)
        self._buffer.clear()
        self._buffered = 0
        self._last = time.monotonic()
        self.delivered = True
        for piece in split_utf8(text, self._max_bytes):
            try:
                await self._on_delta(piece)
            except Exception as e:
                raise CallerError(e) from e
