"""The protected-resource metadata of `/mcp` (RFC 9728) and the 401 that points to it.

`/mcp` takes a tenant's API key as a bearer token and has no OAuth authorization server.
The metadata says so: the resource, `bearer_methods_supported: ["header"]` and no
`authorization_servers`. A 401 at `/mcp` names the document in its `WWW-Authenticate`
challenge (`resource_metadata`) together with the API's message (`error_description`),
so a client that looks for an authorization server finds none and can show why it was
refused. Both paths a client tries are served: `/.well-known/oauth-protected-resource/mcp`
(the path of the resource inserted, RFC 9728 §3.1) and `/.well-known/oauth-protected-resource`.

A client that finds no authorization server falls back to the OAuth endpoints of the API's
own origin (the MCP revisions before 2025-06-18 name them: `/register`, `/authorize`,
`/token`) and registers itself first. `POST /register` answers that registration as RFC 7591
§3.2.2 refuses one, with the API's message, so the client shows why instead of a 404.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get, post

from agency.services.api.auth import PUBLIC_OPT
from agency.services.api.forwarded import public_base

WELL_KNOWN = "/.well-known/oauth-protected-resource"
REGISTRATION = "/register"
NO_OAUTH = (
    "this server has no OAuth authorization server: it takes a tenant's API key as a bearer "
    "token; send 'Authorization: Bearer <api key>'"
)


class ProtectedResource(msgspec.Struct, frozen=True, kw_only=True):
    """RFC 9728 §2: what a client learns of `/mcp` before it has a credential."""

    resource: str
    bearer_methods_supported: list[str]
    resource_name: str


class RegistrationRefused(msgspec.Struct, frozen=True, kw_only=True):
    """RFC 7591 §3.2.2: the error answer to a dynamic client registration."""

    error: str
    error_description: str


def metadata_url(request: Request[Any, Any, Any], mcp_path: str) -> str:
    return f"{public_base(request.scope)}{WELL_KNOWN}{mcp_path}"


def challenge(request: Request[Any, Any, Any], mcp_path: str, message: str) -> str:
    """The `WWW-Authenticate` value of a 401 at `/mcp` (RFC 6750 §3, RFC 9728 §5.1)."""
    description = message.replace("\\", "").replace('"', "'")
    parts = [f'resource_metadata="{metadata_url(request, mcp_path)}"']
    # A request that sent no credential gets no error code (RFC 6750 §3.1).
    if request.headers.get("authorization") or request.headers.get("x-secret"):
        parts.append('error="invalid_token"')
    parts.append(f'error_description="{description}"')
    return "Bearer " + ", ".join(parts)


def metadata_routes(mcp_path: str) -> list[Any]:
    """The protected-resource metadata of `mcp_path` and the refused registration."""
    return [_metadata_route(mcp_path), _registration_route()]


def _registration_route() -> Any:
    @post(REGISTRATION, opt={PUBLIC_OPT: True}, include_in_schema=False, sync_to_thread=False)
    def register() -> Response[RegistrationRefused]:
        refused = RegistrationRefused(error="invalid_client_metadata", error_description=NO_OAUTH)
        return Response(refused, status_code=400, headers={"Cache-Control": "no-store"})

    return register


def _metadata_route(mcp_path: str) -> Any:
    @get(
        [WELL_KNOWN, WELL_KNOWN + mcp_path],
        opt={PUBLIC_OPT: True},
        include_in_schema=False,
        sync_to_thread=False,
    )
    def protected_resource(request: Request[Any, Any, Any]) -> Response[ProtectedResource]:
        document = ProtectedResource(
            resource=public_base(request.scope) + mcp_path,
            bearer_methods_supported=["header"],
            resource_name="Agency MCP server (bearer: a tenant's API key)",
        )
        return Response(document, headers={"Cache-Control": "public, max-age=3600"})

    return protected_resource
