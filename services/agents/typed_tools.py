"""`@tool`'s machinery: a typed function's parameters as a msgspec Struct, which gives the
JSON Schema the model sees and converts the arguments it sends before the call."""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, ParamSpec, Protocol, TypeVar, overload

import msgspec

from agency.services.agents.tools import (
    JsonSchema,
    Tool,
    ToolContext,
    ToolFailed,
    ToolFn,
    ToolResult,
    ToolSpec,
)

_PATH = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>[^`]+)`$")


def signature_tool(fn: Callable[..., Any], name: str) -> tuple[ToolFn, JsonSchema]:
    """`(call, parameters)`: `call(args, ctx)` converts `args` to `fn`'s parameters and calls
    it; `parameters` is their JSON Schema. A `TypeError` for a signature no JSON object can
    fill (`*args`, `**kwargs`, a parameter without a type)."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as e:  # an annotation naming what the module does not define at run time
        raise TypeError(f"tool {name!r}: cannot read the types of its parameters: {e}") from e
    params = list(inspect.signature(fn).parameters.values())
    wants_context = bool(params) and (
        params[0].name == "ctx" or hints.get(params[0].name) is ToolContext
    )
    if wants_context:
        params = params[1:]
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise TypeError(f"tool {name!r}: parameter {p.name!r} cannot be named in JSON")
        if p.name not in hints:
            raise TypeError(f"tool {name!r}: parameter {p.name!r} has no type")
    whole = len(params) == 1 and _is_struct(hints[params[0].name])
    if whole:
        struct: type[msgspec.Struct] = hints[params[0].name]
    else:
        fields = [
            (p.name, _described(hints[p.name]))
            if p.default is p.empty
            else (p.name, _described(hints[p.name]), p.default)
            for p in params
        ]
        struct = msgspec.defstruct(
            f"{name}_arguments", fields, kw_only=True, forbid_unknown_fields=True
        )
    parameters = _schema(struct)
    names = [p.name for p in params]

    def arguments(args: dict[str, Any]) -> dict[str, Any]:
        try:
            value = msgspec.convert(args, struct)
        except msgspec.ValidationError as e:
            raise ToolFailed(f"invalid arguments for tool {name!r}: {argument_problem(e)}") from e
        if whole:
            return {names[0]: value}
        return {n: getattr(value, n) for n in names}

    def prefix(ctx: ToolContext) -> tuple[ToolContext, ...]:
        return (ctx,) if wants_context else ()

    if inspect.iscoroutinefunction(fn):

        async def call_async(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return _plain(await fn(*prefix(ctx), **arguments(args)))

        call: ToolFn = call_async
    else:

        def call_sync(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return _plain(fn(*prefix(ctx), **arguments(args)))

        call = call_sync
    # Named as the function, so an isolated tool's sandbox imports it by that name
    # (`services/agents/isolation.py`: a Tool at the name gives its `fn`).
    functools.update_wrapper(call, fn, assigned=("__module__", "__name__", "__qualname__"))
    return call, parameters


def argument_problem(error: msgspec.ValidationError) -> str:
    """msgspec's message said of the argument: "argument `a`: Expected `int`, got `str`"."""
    message = str(error)
    path = ""
    if found := _PATH.search(message):
        path, message = found["path"], message[: found.start()]
    if found := _MISSING.match(message):
        return f"missing required argument `{_join(path, found['field'])}`"
    if found := _UNKNOWN.match(message):
        return f"unknown argument `{_join(path, found['field'])}`"
    return f"argument `{path}`: {message}" if path else message


def _join(path: str, field: str) -> str:
    return f"{path}.{field}" if path else field


def _is_struct(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, msgspec.Struct)


def _described(hint: Any) -> Any:
    """`Annotated[T, "text"]` as `Annotated[T, Meta(description="text")]`."""
    if typing.get_origin(hint) is not Annotated:
        return hint
    base, *extras = typing.get_args(hint)
    meta = [msgspec.Meta(description=x) if isinstance(x, str) else x for x in extras]
    return Annotated[(base, *meta)]


def _schema(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """The struct's schema inline, with the structs it refers to under `$defs`."""
    schema = msgspec.json.schema(struct)
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    ref = schema.get("$ref", "")
    own: dict[str, Any] = dict(defs.pop(ref.rsplit("/", 1)[-1], schema))
    own.pop("title", None)
    own.setdefault("properties", {})
    return {**own, "$defs": defs} if defs else own


def _plain(result: Any) -> ToolResult:
    """A result the model can read: structs, dataclasses, dates... as JSON values."""
    if result is None or isinstance(result, str):
        return result
    plain: ToolResult = msgspec.to_builtins(result)
    return plain


P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class TypedTool(Tool, Generic[P, R]):
    """A `Tool` made by `@tool` from a typed function, which it keeps as `function` with
    its signature (`add.function(ctx, 1, 2)` type-checks as the function does). Its `fn`
    validates the model's arguments against that signature before calling it."""

    function: Callable[P, R] = field(kw_only=True)


class ToolDecorator(Protocol):
    def __call__(self, fn: Callable[P, R], /) -> TypedTool[P, R]: ...


@overload
def tool(fn: Callable[P, R], /) -> TypedTool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = 30.0,
    max_attempts: int = 3,
    local: bool = False,
) -> ToolDecorator: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = 30.0,
    max_attempts: int = 3,
    local: bool = False,
) -> TypedTool[Any, Any] | ToolDecorator:
    """Make a tool of a typed function, bare (`@tool`) or with arguments (`@tool(local=True)`).

        @tool
        async def add(ctx: ToolContext, a: Annotated[int, "the first term"], b: int = 0) -> str:
            \"\"\"Add two numbers.\"\"\"
            return str(a + b)

    The JSON Schema the model sees comes from the parameters (their types, defaults and
    `Annotated[T, "description"]` or `msgspec.Meta(description=...)`); the description
    from the docstring. A first parameter named `ctx` or typed `ToolContext` receives the
    call's context; a sole other parameter of a `msgspec.Struct` type takes the whole
    arguments object. The arguments are converted (`msgspec.convert`) before the call, and
    a call that does not fit is a tool error naming the argument, for the model to correct.
    `define_tool` remains for a hand-written schema.
    """

    def wrap(f: Callable[P, R]) -> TypedTool[P, R]:
        call, parameters = signature_tool(f, name or f.__name__)
        spec = ToolSpec(
            name=name or f.__name__,
            description=description if description is not None else inspect.getdoc(f) or "",
            parameters=parameters,
        )
        return TypedTool(
            spec=spec,
            fn=call,
            timeout=timeout,
            max_attempts=max_attempts,
            local=local,
            function=f,
        )

    return wrap(fn) if fn is not None else wrap
