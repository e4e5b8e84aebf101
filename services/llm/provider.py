"""The model provider port and its OpenAI-compatible adapter.

`OpenAIProvider` speaks chat completions with streaming to any OpenAI-compatible base URL
(OpenAI itself, a local server, or `services.llm.fake_server`). It is the only retry layer
(the SDK client runs with `max_retries=0`), with the project's retry policy (`stamina`):
transient failures only, bounded by `ModelSettings.max_attempts`.

Whatever the provider does, `complete` returns a checked answer or raises a `ModelError`
whose `kind` says what happened (`services.llm.errors`); only an exception raised by the
caller's own `on_delta` passes through as it is. What is checked in an answer is told in
`services.llm.assembly`.

Retry after partial output: an attempt is retried only while no text has been handed to
`on_delta`. Once text was delivered, a retryable failure is raised as `ModelStreamError`
(`retryable=True`, `partial=True`) and the caller re-runs the whole step; retrying here would
report the same text twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Self, cast

import httpx2
import openai
import stamina
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)

from agency.services.egress import EgressRefused
from agency.services.llm.answer_reading import (
    read_chunks,
    read_into,
    retry_after_header,
    status_detail,
)
from agency.services.llm.assembly import (
    Assembly,
    CallerError,
    Coalescer,
    ModelResponse,
    OnDelta,
    parse_completion,
    recorded_response,
    snippet,
)
from agency.services.llm.errors import (
    ModelConfigError,
    ModelConnectionError,
    ModelError,
    ModelErrorKind,
    ModelRequestError,
    ModelResponseError,
    ModelStatusError,
    ModelStreamError,
    is_retryable_status,
)
from agency.services.llm.port import (
    ModelRequest,
    Provider,
    message_param,
    split_model,
)
from agency.services.llm.pricing import PriceTable
from agency.services.llm.settings import ModelSettings
from agency.services.llm.wire import ChunkReader, WireBroken, encode_body

__all__ = [
    "DEFAULT_BASE_URL",
    "ModelConfigError",
    "ModelConnectionError",
    "ModelError",
    "ModelErrorKind",
    "ModelRequest",
    "ModelRequestError",
    "ModelResponse",
    "ModelResponseError",
    "ModelSettings",
    "ModelStatusError",
    "ModelStreamError",
    "OnDelta",
    "OpenAIProvider",
    "Provider",
    "is_retryable_status",
    "recorded_response",
    "split_model",
]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Connections to the provider at most, and seconds an idle one is kept for the next call:
# the SDK's defaults.
_MAX_CONNECTIONS = 1000
_KEEPALIVE_EXPIRY = 5.0
# Bytes of an error answer read for its message.
_ERROR_BODY_LIMIT = 64 * 1024


class OpenAIProvider:
    """`Provider` over an OpenAI-compatible chat completions endpoint, streaming.

    `settings` bound the call (`ModelSettings`): the timeout of connecting and of every read,
    attempts and backoff for transient failures, the largest answer accepted.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        settings: ModelSettings | None = None,
        prices: PriceTable | None = None,
        strip_prefix: bool = True,
        max_concurrency: int | None = None,
        stream_usage: bool = True,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        self._strip_prefix = strip_prefix
        self._stream_usage = stream_usage
        # Calls in flight at once at most (a provider's rate limit); the others wait here.
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self._prices = prices if prices is not None else PriceTable()
        self.settings = s = settings or ModelSettings()
        timeout = openai.Timeout(s.timeout, connect=min(s.timeout, s.connect_timeout))
        # `transport`: where a tenant's own settings are used, one that connects only to
        # addresses a tenant may reach (`services/egress.py`).
        self._http = openai.DefaultAsyncHttpxClient(
            timeout=timeout,
            transport=transport,
            limits=httpx2.Limits(
                max_connections=_MAX_CONNECTIONS,
                max_keepalive_connections=s.idle_connections,
                keepalive_expiry=_KEEPALIVE_EXPIRY,
            ),
        )
        # The SDK's client says where and with which headers (its key, organization and
        # project from the environment); the call itself goes out on its HTTP client here.
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=0,
            timeout=timeout,
            http_client=self._http,
        )
        self._url = f"{self._client.base_url}chat/completions"
        self._headers = {
            name: value
            for name, value in {**self._client.default_headers, **self._client.auth_headers}.items()
            if isinstance(value, str)
        }
        self._closed = False
        # A provider may quote the key it refused: its errors never carry it on.
        self._key = api_key if len(api_key) >= 8 else ""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
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
        name = split_model(request.model)[1] if self._strip_prefix else request.model
        messages = [message_param(m) for m in request.messages]
        tools = [cast(ChatCompletionFunctionToolParam, t.as_openai()) for t in request.tools]
        s = self.settings
        attempts = 0
        try:
            async for attempt in stamina.retry_context(
                on=self._retry_wait,
                attempts=s.max_attempts,
                timeout=None,  # each attempt is bounded by the read timeout
                wait_initial=s.backoff_initial,
                wait_max=s.backoff_max,
                wait_jitter=s.backoff_initial,
            ):
                with attempt:
                    attempts = attempt.num
                    async with self._slot():
                        response = await self._attempt(name, messages, tools, on_delta)
                    cost = self._prices.cost(response.model or name, response.usage)
                    return replace(response, cost_usd=cost)
        except CallerError as e:
            raise e.error from None
        except ModelError as error:
            error.attempts = attempts
            if error.retryable and attempts >= s.max_attempts:
                error.add_note(f"gave up after {attempts} attempts")
            raise
        raise AssertionError("unreachable: stamina ends with a result or the last error")

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of the provider's `max_concurrency` slots for an attempt, waited for up to
        the timeout (a `timeout`, retried like one)."""
        if self._slots is None:
            yield
            return
        try:
            async with asyncio.timeout(self.settings.timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise ModelConnectionError(
                f"no free slot for a call to {self.base_url} within {self.settings.timeout}s "
                "(its calls at once are limited: max concurrency)",
                timeout=True,
            ) from None
        try:
            yield
        finally:
            self._slots.release()

    def _retry_wait(self, error: Exception) -> bool | float:
        """Whether stamina retries `error`, or after how many seconds the server asked."""
        if not isinstance(error, ModelError) or not error.retryable:
            return False
        if isinstance(error, ModelStreamError) and error.partial:
            return False
        hinted = error.retry_after if isinstance(error, ModelStatusError) else None
        if hinted is not None:
            return min(hinted, self.settings.backoff_max)
        return True

    async def _attempt(
        self,
        name: str,
        messages: list[ChatCompletionMessageParam],
        tools: list[ChatCompletionFunctionToolParam],
        on_delta: OnDelta | None,
    ) -> ModelResponse:
        s = self.settings
        coalescer = Coalescer(on_delta, s.coalesce_ms / 1000, s.max_delta_bytes)
        try:
            return await self._stream(name, messages, tools, coalescer)
        except CallerError:
            raise
        except ModelError as error:
            if error.retryable and coalescer.delivered:
                raise ModelStreamError(
                    f"{error} (after part of the answer was streamed; re-run the step)",
                    kind=error.kind,
                    status=error.status,
                    partial=True,
                ) from error
            raise
        except Exception as e:  # the boundary: nothing else may escape `complete`
            raise ModelResponseError(
                f"the model call failed unexpectedly ({type(e).__name__}: {e})",
                kind="model_error",
            ) from e

    async def _stream(
        self,
        name: str,
        messages: list[ChatCompletionMessageParam],
        tools: list[ChatCompletionFunctionToolParam],
        coalescer: Coalescer,
    ) -> ModelResponse:
        body: dict[str, object] = {"model": name, "messages": messages, "stream": True}
        if self._stream_usage:
            body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = tools
        # The body as built (the wire's shape already), without the SDK's walk of every
        # message and tool schema against its typed parameters (`docs/performance.md`).
        content = encode_body(body)
        # Ids given to calls the server sent without one derive from the request.
        seed = content
        request = self._http.build_request(
            "POST", self._url, content=content, headers=self._headers
        )
        try:
            response = await self._http.send(request, stream=True)
        except EgressRefused as e:  # a tenant's own base URL, to where it may not connect
            raise ModelConfigError(f"the tenant's base URL is refused: {e}") from e
        except httpx2.TimeoutException as e:
            raise self._timeout() from e
        except httpx2.RequestError as e:
            raise ModelConnectionError(
                f"could not reach the model provider at {self.base_url} ({type(e).__name__}: {e})"
            ) from e
        try:  # the response is closed on every exit, cancellation included
            if response.status_code >= 400:
                raise await self._status_error(response)
            content_type = response.headers.get("content-type", "")
            if not content_type.startswith("text/event-stream"):
                return await self._whole(response, content_type, name, seed)
            assembly = Assembly(model=name, max_bytes=self.settings.max_answer_bytes, seed=seed)
            reader = ChunkReader(response)
            async with contextlib.aclosing(reader.chunks()) as chunks:
                try:
                    await read_chunks(chunks, assembly, coalescer, self.settings.timeout)
                except WireBroken as e:
                    raise self._broken(e.cause) from e.cause
        finally:
            await response.aclose()
        answer = assembly.response(done=reader.done)
        await coalescer.finish()
        return answer

    async def _status_error(self, response: httpx2.Response) -> ModelStatusError:
        body = bytearray()
        with contextlib.suppress(httpx2.TimeoutException, httpx2.RequestError):
            await read_into(body, response, _ERROR_BODY_LIMIT)
        should_retry = response.headers.get("x-should-retry")
        return ModelStatusError(
            response.status_code,
            self._redacted(status_detail(bytes(body[:_ERROR_BODY_LIMIT]))),
            retry_after=retry_after_header(response.headers),
            retryable={"true": True, "false": False}.get(should_retry or ""),
        )

    def _redacted(self, text: str) -> str:
        return text.replace(self._key, "[key]") if self._key else text

    async def _whole(
        self, response: httpx2.Response, content_type: str, name: str, seed: bytes
    ) -> ModelResponse:
        """An answer that is no event stream: a whole completion, or what went wrong."""
        limit = self.settings.max_answer_bytes
        body = bytearray()
        try:
            await read_into(body, response, limit)
        except (httpx2.TimeoutException, httpx2.RequestError) as e:
            raise self._broken(e) from e
        if "json" in content_type or body.lstrip()[:1] == b"{":
            return parse_completion(bytes(body), name, limit, seed)
        shown = content_type or "no content type"
        raise ModelResponseError(
            f"the model provider answered HTTP 200 with {shown} instead of an event stream "
            f"or JSON (is its base URL a chat completions API?): "
            f"{snippet(body.decode(errors='replace'))}",
            kind="malformed_response",
        )

    def _timeout(self) -> ModelConnectionError:
        return ModelConnectionError(
            f"model provider at {self.base_url} did not answer within "
            f"{self.settings.timeout}s (AGENCY_MODEL_TIMEOUT)",
            timeout=True,
        )

    def _broken(self, cause: Exception) -> ModelError:
        """The transport failed while the answer came in (streamed or whole)."""
        if isinstance(cause, httpx2.TimeoutException):
            return self._timeout()
        return ModelStreamError(
            f"the answer from {self.base_url} broke off ({type(cause).__name__}: {cause})",
            kind="truncated_stream",
        )
