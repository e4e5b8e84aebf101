"""One tool call, from request to result: arguments, timeout, retries, the text the model sees.

No I/O of its own: the caller records each attempt (`on_attempt`, a `tool.started`) and the
returned result event, so this runs the same with or without NATS.

A tool the operator marked isolated runs in a sandboxed worker process of its own
(`services/sandbox/host.py`) under the same timeout and retries.

A tool that raises is logged with its traceback and the call's ids; its `tool.error` gives
the model `ExcType: message` and keeps, in `raised_at`, the line of the app's code it came from.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import structlog

from agency.contracts.events import ToolError, ToolOutput, ToolRequested, ToolStarted
from agency.contracts.events.tool import MAX_RAISED_AT_CHARS
from agency.contracts.limits import limits, truncate_text
from agency.services.agents.tools import (
    Tool,
    ToolContext,
    ToolFailed,
    ToolResult,
    ToolRetryable,
    result_text,
)
from agency.services.agents.tracebacks import RaisedElsewhere, where

log = structlog.get_logger(__name__)

DEFAULT_BACKOFF: tuple[float, ...] = (0.1, 0.5, 2.0)

OnAttempt = Callable[[ToolStarted], Awaitable[None]]
ToolResultEvent = ToolOutput | ToolError


class InvalidArguments(ValueError):
    """The model's arguments are not a JSON object; the tool is not run."""


def parse_arguments(text: str) -> dict[str, Any]:
    # Models often send "" for a tool without parameters.
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise InvalidArguments(f"arguments are not valid JSON ({e})") from e
    if not isinstance(value, dict):
        raise InvalidArguments(f"arguments must be a JSON object, not {_json_kind(value)}")
    return value


def attempt_budget(request: ToolRequested, tool: Tool) -> int:
    """The stricter of what the runtime asked for and what the tool allows; at least one."""
    return max(1, min(request.max_attempts, tool.max_attempts))


def call_timeout(request: ToolRequested, tool: Tool) -> float:
    """Seconds one attempt may take: the stricter of the request's and the tool's limit."""
    if request.timeout_ms <= 0:
        return tool.timeout
    return min(request.timeout_ms / 1000, tool.timeout)


async def execute(
    request: ToolRequested,
    tool: Tool | None,
    context: ToolContext,
    *,
    on_attempt: OnAttempt,
    prior_attempts: int = 0,
    backoff: tuple[float, ...] = DEFAULT_BACKOFF,
) -> ToolResultEvent:
    """Run `request` with `tool` and return its one result event.

    Timeouts and `ToolRetryable` are retried within the attempt budget; `ToolFailed` and any
    other exception end the call at once. `prior_attempts` are attempts an earlier delivery
    started but never finished (the service was stopped or killed): they count against the
    budget, so a tool that brings its process down is not run without end.
    """
    call = request.call
    if tool is None:
        return _error(request, f"unknown tool {call.name!r}", attempts=0)
    try:
        args = parse_arguments(call.arguments)
    except InvalidArguments as e:
        return _error(request, f"invalid arguments for tool {call.name!r}: {e}", attempts=0)
    budget = attempt_budget(request, tool)
    timeout = call_timeout(request, tool)
    if prior_attempts >= budget:
        return _error(
            request,
            f"tool {call.name!r} did not finish in {prior_attempts} earlier attempt(s) "
            "(the tools service stopped while it ran); it is not run again",
            attempts=prior_attempts,
        )
    attempt = prior_attempts
    while True:
        attempt += 1
        await on_attempt(
            ToolStarted(
                run_id=request.run_id,
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=call.arguments,
                attempt=attempt,
            )
        )
        scope = asyncio.timeout(timeout)
        try:
            async with scope:
                output = result_text(await _invoke(tool, args, replace(context, attempt=attempt)))
        except TimeoutError as e:
            problem = (
                f"TimeoutError: tool {call.name!r} timed out after {timeout:g} s"
                if scope.expired()
                else describe(e)
            )
        except ToolRetryable as e:
            problem = describe(e)
        except RaisedElsewhere as e:  # an isolated tool raised in its sandbox
            _log_raised(request, context, e.raised_at, traceback=e.traceback)
            return _error(request, e.error, attempts=attempt, raised_at=e.raised_at)
        except ToolFailed as e:
            # The tool wrote this message for the model (see `ToolFailed`).
            return _error(request, str(e) or describe(e), attempts=attempt)
        except Exception as e:  # the tool's own failure is the model's answer, not ours
            raised_at = where(e)
            _log_raised(request, context, raised_at, exc_info=e)
            return _error(request, describe(e), attempts=attempt, raised_at=raised_at)
        else:
            # Output over the limit is cut with a visible marker: an event holds at most
            # `max_event_bytes`, and the model reads the head of a huge output anyway.
            output = truncate_text(output, limits().max_tool_output_bytes)
            return ToolOutput(
                run_id=request.run_id, tool_call_id=call.id, tool_name=call.name, output=output
            )
        if attempt >= budget:
            return _error(
                request, f"{problem} (gave up after {attempt} attempts)", attempts=attempt
            )
        retry = attempt - prior_attempts - 1
        await asyncio.sleep(backoff[min(retry, len(backoff) - 1)] if backoff else 0)


async def _invoke(tool: Tool, args: dict[str, Any], context: ToolContext) -> ToolResult:
    if tool.isolation is not None:
        # Imported here: only a system with isolated tools needs the sandbox's machinery.
        from agency.services.sandbox.host import run_isolated

        return await run_isolated(tool, args, context)
    if inspect.iscoroutinefunction(tool.fn):
        return await tool(args, context)
    # A blocking function on the event loop would stall every other call and the ack
    # heartbeats, and no timeout could interrupt it. On a thread the timeout answers the
    # model in time, though Python cannot stop the thread itself.
    result = await asyncio.to_thread(tool.fn, args, context)
    if inspect.isawaitable(result):
        return await result
    return result


def describe(error: BaseException) -> str:
    """`ExcType: message`, what the model sees of an exception."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _log_raised(
    request: ToolRequested, context: ToolContext, raised_at: str, **traceback: Any
) -> None:
    """The traceback of a tool that raised, for its author: the model sees only the error."""
    log.warning(
        "tool raised",
        tool=request.call.name,
        raised_at=raised_at,
        tenant_id=context.tenant_id,
        thread_id=context.thread_id,
        run_id=request.run_id,
        call_id=request.call.id,
        **traceback,
    )


def _error(request: ToolRequested, error: str, *, attempts: int, raised_at: str = "") -> ToolError:
    return ToolError(
        run_id=request.run_id,
        tool_call_id=request.call.id,
        tool_name=request.call.name,
        error=truncate_text(error, limits().max_tool_output_bytes),
        attempts=attempts,
        raised_at=raised_at[:MAX_RAISED_AT_CHARS],
    )


def _json_kind(value: object) -> str:
    match value:
        case list():
            return "an array"
        case str():
            return "a string"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case None:
            return "null"
    return type(value).__name__
