"""The strict body check finds each handler's own body type."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec
from litestar.params import JSONBody

from agency.services.api import bodies


class First(msgspec.Struct):
    name: str


class Second(msgspec.Struct):
    settings: dict[str, Any]


def _request(body: Any) -> Any:
    data = SimpleNamespace(annotation=JSONBody[body])
    handler = SimpleNamespace(parsed_fn_signature=SimpleNamespace(parameters={"data": data}))
    return SimpleNamespace(route_handler=handler)


def test_a_handler_that_got_a_gone_handler_s_id_gets_its_own_body_type() -> None:
    """An id is unique only while its object lives: tests build many apps, and a new
    handler may get the id of one whose app is gone."""
    request = _request(Second)
    gone = _request(First).route_handler
    bodies._cache[id(request.route_handler)] = (gone, First)
    assert bodies._body_type(request) is Second
    assert bodies._body_type(request) is Second
