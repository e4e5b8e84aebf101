"""A thread's files as MCP resources.

A file is `agency://agencies/{agencyId}/threads/{threadId}/files/{path}`, its path
percent-encoded with `/` kept (`notes/todo.md`, `%2Fplan.md` for `/plan.md`). Every read
goes through the API as the caller (`GET …/state`), so another tenant's thread is not
found, exactly like one that does not exist.
"""

from __future__ import annotations

import mimetypes
import re
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agency.services.client import ApiError, AsyncAgencyClient

SCHEME = "agency"
TEMPLATE = "agency://agencies/{agencyId}/threads/{threadId}/files/{+path}"
# How many threads one `resources/list` page covers: each is one read of its state.
THREADS_PER_PAGE = 20
# The 2026-07-28 revision says a missing resource is invalid params; the 2025 ones had
# a code of their own.
_NOT_FOUND_2025 = -32002
_URI = re.compile(r"agency://agencies/([^/]+)/threads/([^/]+)/files/(.+)", re.DOTALL)

TEMPLATES = types.ListResourceTemplatesResult(
    resource_templates=[
        types.ResourceTemplate(
            uri_template=TEMPLATE,
            name="thread-file",
            title="A thread's file",
            description="A file an agent of the thread wrote (its virtual file system), as "
            "`get_state` lists them under `files`.",
            mime_type="text/plain",
        )
    ]
)


def file_uri(agency_id: str, thread_id: str, path: str) -> str:
    return (
        f"{SCHEME}://agencies/{quote(agency_id, safe='')}/threads/{quote(thread_id, safe='')}"
        f"/files/{quote(path, safe='/')}"
    )


def _mime_type(path: str) -> str:
    guessed, _ = mimetypes.guess_type(path, strict=False)
    return guessed if guessed is not None and guessed.startswith("text/") else "text/plain"


def _not_found(protocol_version: str | None, uri: str, message: str) -> MCPError:
    modern = protocol_version in MODERN_PROTOCOL_VERSIONS
    code = types.INVALID_PARAMS if modern else _NOT_FOUND_2025
    return MCPError(code=code, message=message, data={"uri": uri})


def _parse(uri: str) -> tuple[str, str, str]:
    match = _URI.fullmatch(uri)
    if match is None:
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"unknown resource URI {uri[:200]!r}: a thread's file is "
            "agency://agencies/{agencyId}/threads/{threadId}/files/{path}",
        )
    agency_id, thread_id, path = (unquote(part) for part in match.groups())
    return agency_id, thread_id, path


def _cursor(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit() or len(cursor) > 9:
        raise MCPError(code=types.INVALID_PARAMS, message=f"invalid cursor {cursor[:40]!r}")
    return int(cursor)


async def list_files(client: AsyncAgencyClient, cursor: str | None) -> types.ListResourcesResult:
    """The files of the caller's threads, a page of threads at a time (newest first)."""
    start = _cursor(cursor)
    threads = [
        thread
        for agency in await client.list_agencies()
        for thread in await client.list_threads(agency.id)
    ]
    threads.sort(key=lambda t: (t.created_at, t.id), reverse=True)
    page = threads[start : start + THREADS_PER_PAGE]
    resources: list[types.Resource] = []
    for thread in page:
        try:
            state = (await client.state(thread.agency_id, thread.id)).state
        except ApiError as e:
            if e.status == 404:  # deleted since it was listed
                continue
            raise
        resources.extend(
            types.Resource(
                uri=file_uri(thread.agency_id, thread.id, path),
                name=path,
                title=f"{path} ({state.agent_type} {thread.id})",
                mime_type=_mime_type(path),
                size=len(content.encode()),
            )
            for path, content in state.files.items()
        )
    after = start + THREADS_PER_PAGE
    return types.ListResourcesResult(
        resources=resources, next_cursor=str(after) if after < len(threads) else None
    )


async def read_file(
    client: AsyncAgencyClient, uri: str, protocol_version: str | None
) -> types.ReadResourceResult:
    agency_id, thread_id, path = _parse(uri)
    try:
        state = (await client.state(agency_id, thread_id)).state
    except ApiError as e:
        if e.status in (400, 404):
            raise _not_found(protocol_version, uri, f"{e.message} (HTTP {e.status})") from e
        raise
    content = state.files.get(path)
    if content is None:
        known = ", ".join(sorted(state.files)[:20]) or "none"
        raise _not_found(
            protocol_version,
            uri,
            f"thread {thread_id} has no file {path[:200]!r}; its files: {known}",
        )
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, mime_type=_mime_type(path), text=content)]
    )
