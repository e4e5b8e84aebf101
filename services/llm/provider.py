"""The model provider port and its OpenAI-compatible adapter.

`OpenAIProvider` speaks chat completions with streaming to any OpenAI-compatible base URL
(OpenAI itself, a local server, or `services.llm.fake_server`). It is the only retry layer:
the SDK client runs with `max_retries=0`.

Retry after partial output: an attempt is retried only while no text has been handed to
`on_delta`. Once text was delivered, a retryable failure is raised as `ModelStreamError`
(`retryable=True`, `partial=True`) and the caller re-runs the whole step; retrying here would
report the same text twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, cast

import openai
import structlog
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)

from contracts.events.base import ChatMessage, ToolCall, Usage
from services.agents.tools import ToolSpec

log = structlog.get_logger(__name__)

OnDelta = Callable[[str], Awaitable[None]]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Prefixes naming an OpenAI-compatible provider; the adapter strips them.
KNOWN_PROVIDERS = frozenset({"openai"})
# Prefixes that belong to the model name itself (OpenAI fine-tuned models: "ft:gpt-4o:org::id").
NAME_PREFIXES = frozenset({"ft"})
RETRYABLE_STATUSES = frozenset({408, 409, 429})


# --- errors ------------------------------------------------------------------------------


class ModelError(Exception):
    """A model call failed. `retryable` says whether the same request may succeed later."""

    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.attempts = 1


class ModelRequestError(ModelError):
    """The request cannot be sent as it is (unknown provider prefix, malformed message)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class ModelConfigError(ModelError):
    """No usable provider configuration."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class ModelStatusError(ModelError):
    """The provider answered with an HTTP error status."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        if retryable is None:
            retryable = is_retryable_status(status)
        advice = "transient, worth retrying" if retryable else "not retryable: fix the request"
        super().__init__(
            f"model provider answered HTTP {status} ({advice}): {detail}",
            retryable=retryable,
            status=status,
        )
        self.retry_after = retry_after


class ModelConnectionError(ModelError):
    """The provider could not be reached, or did not answer in time."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message, retryable=True)
        self.timeout = timeout


class ModelStreamError(ModelError):
    """The answer stream broke, reported an error, or ended incomplete.

    `partial` is true when text had already been delivered to `on_delta`: the caller must
    re-run the step (and discard what it showed) rather than expect this adapter to retry.
    """

    def __init__(self, message: str, *, status: int | None = None, partial: bool = False) -> None:
        super().__init__(message, retryable=True, status=status)
        self.partial = partial


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


# --- request and response ----------------------------------------------------------------


def split_model(model: str) -> tuple[str, str]:
    """("openai", "gpt-4.1-mini") for "openai:gpt-4.1-mini" or "gpt-4.1-mini".

    Raises `ModelRequestError` for an unknown provider prefix.
    """
    prefix, sep, rest = model.partition(":")
    if not sep or prefix in NAME_PREFIXES:
        name, provider = model, "openai"
    elif prefix in KNOWN_PROVIDERS:
        name, provider = rest, prefix
    else:
        known = ", ".join(sorted(KNOWN_PROVIDERS))
        raise ModelRequestError(
            f"unknown model provider {prefix!r} in model {model!r}: use one of {known} "
            f"(e.g. 'openai:gpt-4.1-mini') or a bare model name"
        )
    if not name:
        raise ModelRequestError(f"model {model!r} names no model after the provider prefix")
    return provider, name


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One chat completion request. `model` may carry a provider prefix ("openai:…")."""

    model: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class ModelResponse:
    message: ChatMessage
    usage: Usage
    finish_reason: str
    model: str


class Provider(Protocol):
    async def complete(
        self, request: ModelRequest, on_delta: OnDelta | None = None
    ) -> ModelResponse: ...


def _message_param(message: ChatMessage) -> ChatCompletionMessageParam:
    match message.role:
        case "system" | "user":
            plain: dict[str, Any] = {"role": message.role, "content": message.content}
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


# --- streaming assembly ------------------------------------------------------------------


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Assembly:
    """Folds stream chunks into one assistant message."""

    model: str
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    def add(self, chunk: ChatCompletionChunk) -> str:
        """Fold one chunk in; return its new text."""
        if chunk.model:
            self.model = chunk.model
        if chunk.usage is not None:
            self.usage = Usage(
                input_tokens=chunk.usage.prompt_tokens,
                output_tokens=chunk.usage.completion_tokens,
            )
        new_text = ""
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                new_text += delta.content
            for fragment in delta.tool_calls or ():
                call = self.calls.setdefault(fragment.index, _PartialCall())
                # Servers differ in whether they repeat id/name on later fragments: first wins.
                if fragment.id and not call.id:
                    call.id = fragment.id
                if fragment.function is not None:
                    if fragment.function.name and not call.name:
                        call.name = fragment.function.name
                    if fragment.function.arguments:
                        call.arguments.append(fragment.function.arguments)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        if new_text:
            self.text.append(new_text)
        return new_text

    def response(self) -> ModelResponse:
        if self.finish_reason is None:
            raise ModelStreamError(
                "the model stream ended without a finish_reason: the answer is incomplete"
            )
        calls = tuple(
            ToolCall(
                id=partial.id or f"call_{index}",
                name=partial.name,
                arguments="".join(partial.arguments) or "{}",
            )
            for index, partial in sorted(self.calls.items())
        )
        message = ChatMessage(role="assistant", content="".join(self.text), tool_calls=calls)
        return ModelResponse(
            message=message, usage=self.usage, finish_reason=self.finish_reason, model=self.model
        )


class _Coalescer:
    """Hands streamed text to `on_delta` at most once per interval, in order.

    The first window opens with the first text, so an answer that is complete within one
    window produces no delta at all: `model.completed` carries its text, and the log is
    spared two appends per fast model call. Once a delta went out, the rest follows, so
    the deltas of a call always add up to its whole text.
    """

    def __init__(self, on_delta: OnDelta | None, interval: float) -> None:
        self._on_delta = on_delta
        self._interval = interval
        self._buffer: list[str] = []
        self._last = -math.inf
        self.delivered = False

    def add(self, text: str) -> None:
        if self._on_delta is not None and text:
            if self._last == -math.inf:
                self._last = time.monotonic()
            self._buffer.append(text)

    async def finish(self) -> None:
        if self.delivered:
            await self.flush()
        self._buffer.clear()

    def wait_budget(self) -> float | None:
        """How long the next read may block before buffered text is due (None: no limit)."""
        if not self._buffer:
            return None
        return max(0.0, self._last + self._interval - time.monotonic())

    async def flush(self) -> None:
        if not self._buffer or self._on_delta is None:
            return
        text = "".join(self._buffer)
        self._buffer.clear()
        self._last = time.monotonic()
        self.delivered = True
        await self._on_delta(text)


async def _next_chunk(chunks: AsyncIterator[ChatCompletionChunk]) -> ChatCompletionChunk | None:
    return await anext(chunks, None)


# --- the adapter -------------------------------------------------------------------------


def _status_detail(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return error.message


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, `retry-after` seconds or date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        with contextlib.suppress(ValueError):
            return max(0.0, float(millis) / 1000)
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    with contextlib.suppress(TypeError, ValueError, OverflowError):
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time())
    return None


class OpenAIProvider:
    """`Provider` over an OpenAI-compatible chat completions endpoint, streaming.

    `max_attempts` bounds tries per call (connection errors, timeouts, 408/409/429/5xx);
    waits grow as `backoff_base * 2**n` with jitter, or follow `retry-after`, both capped at
    `backoff_max`. `timeout` bounds connecting and each read of the stream.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        timeout: float = 120.0,
        max_attempts: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        coalesce_ms: int = 50,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.base_url = base_url
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._coalesce = coalesce_ms / 1000
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=0,
            timeout=openai.Timeout(timeout, connect=min(timeout, 10.0)),
        )
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, timeout: float = 5.0) -> None:
        """Close the HTTP client; idempotent, bounded, and finished even if we are cancelled."""
        if self._closed:
            return
        self._closed = True
        closing = asyncio.ensure_future(self._client.close())
        await asyncio.wait_for(asyncio.shield(closing), timeout)

    async def complete(
        self, request: ModelRequest, on_delta: OnDelta | None = None
    ) -> ModelResponse:
        if self._closed:
            raise ModelConfigError("this provider is closed; create a new one")
        _, name = split_model(request.model)
        messages = [_message_param(m) for m in request.messages]
        tools = [cast(ChatCompletionFunctionToolParam, t.as_openai()) for t in request.tools]
        attempt = 0
        while True:
            attempt += 1
            coalescer = _Coalescer(on_delta, self._coalesce)
            try:
                return await self._attempt(name, messages, tools, coalescer)
            except ModelError as error:
                error.attempts = attempt
                if error.retryable and coalescer.delivered:
                    raise ModelStreamError(
                        f"{error} (after part of the answer was streamed; re-run the step)",
                        status=error.status,
                        partial=True,
                    ) from error
                if not error.retryable or attempt >= self._max_attempts:
                    if error.retryable:
                        error.add_note(f"gave up after {attempt} attempts")
                    raise
                delay = self._backoff(attempt, error)
                log.warning(
                    "model call failed, retrying",
                    model=name,
                    attempt=attempt,
                    delay=round(delay, 3),
                    error=str(error),
                )
                await asyncio.sleep(delay)

    def _backoff(self, attempt: int, error: ModelError) -> float:
        hinted = error.retry_after if isinstance(error, ModelStatusError) else None
        if hinted is not None:
            return min(hinted, self._backoff_max)
        exponential = min(self._backoff_base * 2.0 ** (attempt - 1), self._backoff_max)
        # Jitter spreads retries of many threads hitting the same outage.
        return exponential * random.uniform(0.5, 1.0)

    async def _attempt(
        self,
        name: str,
        messages: list[ChatCompletionMessageParam],
        tools: list[ChatCompletionFunctionToolParam],
        coalescer: _Coalescer,
    ) -> ModelResponse:
        try:
            stream = await self._client.chat.completions.create(
                model=name,
                messages=messages,
                tools=tools if tools else openai.omit,
                stream=True,
                stream_options={"include_usage": True},
            )
        except openai.APIError as e:
            raise self._translate(e) from e
        assembly = _Assembly(model=name)
        # `async with` closes the HTTP response on every exit, cancellation included.
        async with stream:
            try:
                await self._read(stream, assembly, coalescer)
            except openai.APIError as e:
                raise self._translate(e) from e
        response = assembly.response()
        await coalescer.finish()
        return response

    async def _read(
        self,
        chunks: AsyncIterator[ChatCompletionChunk],
        assembly: _Assembly,
        coalescer: _Coalescer,
    ) -> None:
        # The next chunk is read in its own task so buffered text can be flushed on time
        # while the model pauses, without cancelling (and so breaking) the stream's read.
        pending: asyncio.Future[ChatCompletionChunk | None] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(_next_chunk(chunks))
                done, _ = await asyncio.wait((pending,), timeout=coalescer.wait_budget())
                if not done:
                    await coalescer.flush()
                    continue
                chunk = pending.result()
                pending = None
                if chunk is None:
                    return
                coalescer.add(assembly.add(chunk))
                if coalescer.wait_budget() == 0.0:
                    await coalescer.flush()
        finally:
            if pending is not None:
                pending.cancel()
                await asyncio.wait((pending,), timeout=self._timeout)
                if pending.done() and not pending.cancelled():
                    pending.exception()  # retrieved: the stream is being abandoned anyway

    def _translate(self, error: openai.APIError) -> ModelError:
        if isinstance(error, openai.APITimeoutError):
            return ModelConnectionError(
                f"model provider at {self.base_url} did not answer within {self._timeout}s",
                timeout=True,
            )
        if isinstance(error, openai.APIConnectionError):
            cause = error.__cause__
            reason = f"{type(cause).__name__}: {cause}" if cause else error.message
            return ModelConnectionError(
                f"could not reach the model provider at {self.base_url} ({reason})"
            )
        if isinstance(error, openai.APIStatusError):
            headers = error.response.headers
            should_retry = headers.get("x-should-retry")
            return ModelStatusError(
                error.status_code,
                _status_detail(error),
                retry_after=_retry_after(headers),
                retryable={"true": True, "false": False}.get(should_retry or ""),
            )
        return ModelStreamError(f"the model stream reported an error: {error.message}")


def provider_from_env(fake_url: str | None) -> OpenAIProvider:
    """A provider from OPENAI_API_KEY / OPENAI_BASE_URL, or else the fake server at `fake_url`."""
    api_key = os.environ.get("OPENAI_API_KEY")
    base_url = os.environ.get("OPENAI_BASE_URL")
    if api_key or base_url:
        # Local OpenAI-compatible servers often take no key, but the SDK insists on one.
        return OpenAIProvider(base_url=base_url or DEFAULT_BASE_URL, api_key=api_key or "none")
    if fake_url is None:
        raise ModelConfigError(
            "no model provider configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for a "
            "non-OpenAI endpoint), or run with the fake LLM server"
        )
    return OpenAIProvider(base_url=fake_url, api_key="fake")
