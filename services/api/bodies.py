"""Request bodies are decoded strictly: what the OpenAPI document says, no more.

litestar converts a JSON body to the handler's type in msgspec's lax mode, which takes
`0` for `false` and `"3"` for `3`; the document (and every other client) says a boolean is
a boolean. This hook checks the body against the handler's `data` type in strict mode first
and answers 400 saying what is wrong; malformed or missing JSON is left to litestar's own
messages. Before anything decodes it, a body that is not UTF-8 or is nested deeper than
`guards.MAX_JSON_DEPTH` is refused (400): this hook runs for every route with a body.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request
from litestar.exceptions import ValidationException

from agency.services.api.guards import json_body

# Keyed by the handler's id, holding the handler itself: an id is unique only while its
# object lives, and a handler of an app gone (tests build many apps) must not lend its
# body type to a new handler that got the same id.
_cache: dict[int, tuple[object, Any]] = {}


def _body_type(request: Request[Any, Any, Any]) -> Any:
    handler = request.route_handler
    key = id(handler)
    cached = _cache.get(key)
    if cached is None or cached[0] is not handler:
        data = handler.parsed_fn_signature.parameters.get("data")
        annotation = None if data is None else data.annotation
        # `JSONBody[T]` is `Annotated[T, Body(...)]`.
        cached = (handler, getattr(annotation, "__origin__", annotation))
        _cache[key] = cached
    return cached[1]


async def strict_body(request: Request[Any, Any, Any]) -> None:
    body_type = _body_type(request)
    if body_type is None or request.method not in ("POST", "PUT", "PATCH"):
        return
    raw = await request.body()
    if not raw.strip():
        return
    try:
        value = json_body(raw)
    except msgspec.DecodeError:
        return
    try:
        msgspec.convert(_integral(value), body_type, strict=True)
    except msgspec.ValidationError as e:
        raise ValidationException(_sentence(str(e))) from e
    except TypeError:  # a type msgspec cannot check on its own: litestar's decoding decides
        return


def _integral(value: Any) -> Any:
    """JSON has one number type: `3.0` is the integer 3 (as JSON Schema says), `3.5` is not."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(item) for item in value]
    return value


def _sentence(error: str) -> str:
    """msgspec's `Expected … - at `$.a.b`` as `request body field 'a.b': Expected …`.

    A problem with a mapping's key (`- at `key` in `$.files``) names the field as `(a key)`.
    """
    for marker, suffix in ((" - at `key` in `$", " (a key)"), (" - at `$", "")):
        message, sep, where = error.rpartition(marker)
        if sep:
            path = where.removesuffix("`").removeprefix(".")
            if not path:
                return f"request body: {message}"
            return f"request body field {path!r}{suffix}: {message}"
    return f"request body: {error}"
