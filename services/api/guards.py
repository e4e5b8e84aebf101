"""What every request must be before any route looks at it: a path that is UTF-8 without
NUL, and a JSON body that is UTF-8 and nested at most `MAX_JSON_DEPTH` levels.

Both are checked once, here, for every route, so no handler (nor litestar's own decoding,
nor a file lookup) meets them: a path with NUL would reach the file system ("embedded null
byte"), and a body nested a thousand levels exhausts the decoder's recursion. The answer
is a 400 naming the problem (and the limit), never a 500.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote_to_bytes

import msgspec
from litestar.exceptions import ValidationException
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

# Deeper than any body of the API has a use for (a blueprint's `config.extra`, LangGraph
# inputs), far below what exhausts a decoder.
MAX_JSON_DEPTH = 64
TOO_DEEP = f"request body: JSON nested deeper than {MAX_JSON_DEPTH} levels"
NOT_UTF8 = "request body: not valid UTF-8 (JSON text must be UTF-8)"


def path_problem(scope: Scope) -> str | None:
    """Why the request's path cannot name anything, or None."""
    raw = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    try:
        decoded = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return "the path is not valid UTF-8 once percent-decoded"
    if "\x00" in decoded or "\x00" in scope["path"]:
        return "the path contains a NUL character (%00)"
    return None


class PathGuard(ASGIMiddleware):
    """400 for a path with NUL or bytes that are not UTF-8, before the route sees it."""

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        problem = path_problem(scope)
        if problem is not None:
            raise ValidationException(problem)
        await next_app(scope, receive, send)


def depth_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether decoded JSON nests arrays and objects more than `limit` levels (iterative:
    it stops at the first container past the limit)."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def json_body(raw: bytes) -> Any:
    """A body decoded as JSON, or a 400 when it is not UTF-8 or nests deeper than the limit.
    For routes that read their body themselves (the protocols' JSON-RPC and REST bindings);
    `msgspec.DecodeError` is left to the caller, whose protocol words the parse error."""
    try:
        value = msgspec.json.decode(raw)
    except UnicodeDecodeError as e:
        raise ValidationException(NOT_UTF8) from e
    except RecursionError as e:  # far deeper than the limit
        raise ValidationException(TOO_DEEP) from e
    if depth_exceeds(value):
        raise ValidationException(TOO_DEEP)
    return value
