"""What a LangGraph client asks the server before anything else: `/info` (Agent Chat UI's
health check, the features served) and `/ok`. Both answer without a key, as LangGraph's
own server does: they say nothing of any tenant."""

from __future__ import annotations

from typing import Any

from litestar import Request, get

from agency.contracts.version import package_version
from agency.services.api.auth import PUBLIC_OPT

PREFIX = "/langgraph"


def _serves(request: Request[Any, Any, Any], part: str) -> bool:
    """Whether a route of this surface has `part` in its path (served by this build)."""
    return any(p.startswith(PREFIX) and part in p for p in request.app.route_handler_method_map)


@get("/info", opt={PUBLIC_OPT: True}, summary="LangGraph: the server and what it serves")
async def info(request: Request[Any, Any, Any]) -> dict[str, Any]:
    return {
        "version": package_version(),
        "server": "agency",
        "flags": {
            "assistants": True,
            "crons": _serves(request, "/crons"),
            "store": _serves(request, "/store"),
            "langsmith": False,
        },
    }


@get("/ok", opt={PUBLIC_OPT: True}, summary="LangGraph: the server answers")
async def ok() -> dict[str, bool]:
    return {"ok": True}


META_ROUTES = [info, ok]
