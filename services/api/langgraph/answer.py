"""The decorator of LangGraph's POST routes: each answers 200, as LangGraph's server does,
not the 201 litestar gives a POST by default."""

from __future__ import annotations

from typing import Any

from litestar import post


def post_ok(path: str, *, summary: str, **options: Any) -> post:
    """`@post(path, status_code=200, summary=summary, **options)`."""
    return post(path, status_code=200, summary=summary, **options)
