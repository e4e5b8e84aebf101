"""`GET /` (the console's page) and `/console/…` (its static files). Both need no
credential: the page asks for an API key and sends it with each API call."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from litestar import MediaType, Request, Router, get
from litestar.file_system import BaseLocalFileSystem
from litestar.handlers import HTTPRouteHandler
from litestar.response import Response
from litestar.static_files import create_static_files_router
from litestar.types import FileInfo, PathType

from agency.contracts.codec import EVENT_TYPES
from agency.services.api.auth import PUBLIC_OPT
from agency.services.api.forwarded import forwarded_prefix

# Resolved: the static files router looks a file up by its real path, and in a source
# checkout this module is reached through a link (agency/services -> ../services).
STATIC = (Path(__file__).parent / "static").resolve()


@functools.lru_cache(maxsize=8)
def page(prefix: str = "") -> str:
    """The page, with the event types the streams may send (for per-type SSE listeners),
    its assets and API calls under the path a trusted proxy serves Agency at (`prefix`,
    `services/api/forwarded.py`: a plain path, nothing to escape)."""
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    html = html.replace('"/console/', f'"{prefix}/console/').replace("__ROOT__", prefix)
    return html.replace("__EVENT_TYPES__", json.dumps(sorted(EVENT_TYPES)))


@get("/", opt={PUBLIC_OPT: True}, include_in_schema=False, media_type=MediaType.HTML)
async def console_page(request: Request[Any, Any, Any]) -> Response[str]:
    # The page is small and names its assets; it must never be served stale.
    html = page(forwarded_prefix(request.scope))
    return Response(html, media_type=MediaType.HTML, headers={"Cache-Control": "no-cache"})


class ConsoleFiles(BaseLocalFileSystem):
    """The console's own files and nothing else: any other name is not found (404), also
    one the operating system cannot look up (too long, say), which would fail otherwise."""

    def __init__(self, root: Path) -> None:
        # As the router resolves its directories: the package reaches this one by a link.
        self._files = frozenset(str(p) for p in root.resolve().rglob("*") if p.is_file())

    async def info(self, path: PathType, **kwargs: Any) -> FileInfo:
        if str(path) not in self._files:
            raise FileNotFoundError(path)
        return await super().info(path, **kwargs)


console_files = create_static_files_router(
    path="/console",
    directories=[STATIC],
    file_system=ConsoleFiles(STATIC),
    opt={PUBLIC_OPT: True},
    include_in_schema=False,
    name="console",
)

CONSOLE_PAGES: list[HTTPRouteHandler | Router] = [console_page, console_files]
