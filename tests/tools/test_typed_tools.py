"""`@tool`: the schema comes from the typed signature and docstring; the model's arguments
are converted before the call, and a call that does not fit is a tool error naming the
argument."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import msgspec
import pytest

from agency import TypedTool, tool
from agency.contracts.events import ToolCall, ToolError, ToolOutput, ToolRequested, ToolStarted
from agency.services.agents.isolation import function_reference, resolve
from agency.services.agents.tools import ToolContext, ToolFailed
from agency.services.tool_execution.executor import execute

CTX = ToolContext(tenant_id="t", agency_id="a", thread_id="th", run_id="r", call_id="c")


@tool
async def add(ctx: ToolContext, a: Annotated[int, "the first term"], b: int = 0) -> str:
    """Add two integers."""
    return f"{a} + {b} = {a + b} in {ctx.thread_id}"


class Order(msgspec.Struct, forbid_unknown_fields=True):
    item: Annotated[str, msgspec.Meta(description="what to buy", min_length=1)]
    quantity: int = 1


@tool(name="place_order", local=True)
def order(ctx: ToolContext, order: Order) -> Order:
    """Place an order."""
    return order


@tool
async def basket(orders: list[Order], note: str | None = None) -> dict[str, int]:
    return {"items": sum(o.quantity for o in orders)}


def test_the_schema_comes_from_the_signature_and_the_docstring() -> None:
    assert add.spec.name == "add" and add.spec.description == "Add two integers."
    assert add.spec.parameters == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "the first term"},
            "b": {"type": "integer", "default": 0},
        },
        "required": ["a"],
        "additionalProperties": False,
    }


def test_a_sole_struct_parameter_is_the_whole_arguments_object() -> None:
    assert (order.name, order.local, order.spec.description) == (
        "place_order",
        True,
        "Place an order.",
    )
    assert order.spec.parameters == {
        "type": "object",
        "properties": {
            "item": {"type": "string", "description": "what to buy", "minLength": 1},
            "quantity": {"type": "integer", "default": 1},
        },
        "required": ["item"],
        "additionalProperties": False,
    }


def test_nested_structs_are_defined_once_under_defs() -> None:
    parameters = dict(basket.spec.parameters)
    assert parameters["properties"]["orders"] == {
        "type": "array",
        "items": {"$ref": "#/$defs/Order"},
    }
    assert parameters["required"] == ["orders"]
    assert parameters["$defs"]["Order"]["required"] == ["item"]


async def test_the_arguments_are_converted_and_the_context_passed() -> None:
    assert await add({"a": 2, "b": 3}, CTX) == "2 + 3 = 5 in th"
    assert await add({"a": 2}, CTX) == "2 + 0 = 2 in th"
    # A struct result is what the model reads as JSON.
    assert await order({"item": "tea", "quantity": 2}, CTX) == {"item": "tea", "quantity": 2}
    assert await basket({"orders": [{"item": "tea"}, {"item": "milk", "quantity": 2}]}, CTX) == {
        "items": 3
    }


@pytest.mark.parametrize(
    ("typed", "args", "problem"),
    [
        (add, {"a": "two"}, "invalid arguments for tool 'add': argument `a`: Expected `int`, got `str`"),
        (add, {"b": 1}, "invalid arguments for tool 'add': missing required argument `a`"),
        (add, {"a": 1, "c": 1}, "invalid arguments for tool 'add': unknown argument `c`"),
        (order, {"item": ""}, "argument `item`: Expected `str` of length >= 1"),
        (basket, {"orders": [{"item": "tea"}, {"quantity": 2}]}, "missing required argument `orders[1].item`"),
    ],
    ids=["wrong-type", "missing", "unknown", "constraint", "nested"],
)  # fmt: skip
async def test_a_call_that_does_not_fit_is_refused_naming_the_argument(
    typed: TypedTool[Any, Any], args: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ToolFailed) as refused:
        await typed(args, CTX)
    assert problem in str(refused.value)


async def test_the_executor_answers_a_bad_call_with_a_tool_error_once() -> None:
    started: list[ToolStarted] = []

    async def on_attempt(event: ToolStarted) -> None:
        started.append(event)

    call = ToolCall(id="c1", name="add", arguments='{"a": "two"}')
    request = ToolRequested(run_id="r", step=1, call=call)
    result = await execute(request, add, CTX, on_attempt=on_attempt, backoff=())
    assert isinstance(result, ToolError) and len(started) == 1
    assert (
        result.error == "invalid arguments for tool 'add': argument `a`: Expected `int`, got `str`"
    )
    good = ToolRequested(
        run_id="r", step=1, call=ToolCall(id="c2", name="add", arguments='{"a": 1}')
    )
    result = await execute(good, add, CTX, on_attempt=on_attempt, backoff=())
    assert isinstance(result, ToolOutput) and result.output == "1 + 0 = 1 in th"


async def test_the_decorated_tool_keeps_the_function_and_its_types() -> None:
    typed: Callable[[ToolContext, int, int], Coroutine[Any, Any, str]] = add.function
    assert await typed(CTX, 1, 2) == "1 + 2 = 3 in th"
    assert order.function(CTX, Order(item="x")) == Order(item="x")

    async def misuse() -> None:  # never run: mypy (strict, unused ignores reported) checks it
        await add.function(CTX, "two")  # type: ignore[arg-type]
        order.function(CTX, {"item": "x"})  # type: ignore[arg-type]

    assert callable(misuse)


def test_a_signature_no_json_object_can_fill_is_refused_when_decorated() -> None:
    async def untyped(ctx: ToolContext, a) -> str:  # type: ignore[no-untyped-def]
        return str(a)

    async def spread(*words: str) -> str:
        return " ".join(words)

    with pytest.raises(TypeError, match="parameter 'a' has no type"):
        tool(untyped)
    with pytest.raises(TypeError, match="parameter 'words' cannot be named in JSON"):
        tool(spread)


def test_an_isolated_worker_finds_the_validating_call_by_the_functions_name() -> None:
    assert function_reference("add", add.fn) == (__name__, "add")
    assert resolve(__name__, "add") is add.fn
