"""`/schema`: the OpenAPI document (`/schema/openapi.json`, `.yaml`) and Redoc's page of
it (at `/schema` and `/schema/redoc`), served whole by the API, with no request to another
host: Redoc's bundle is vendored with the console's libraries
(`console/static/vendor/redoc/`, served under `/console/vendor/`), and the page loads no
web fonts and no remote icon. Redoc itself would still show a logo from its CDN; the
pages' `Content-Security-Policy` keeps the browser on this host (the logo then hides
itself). litestar's other pages (Swagger UI, Elements, RapiDoc) load their code from CDNs,
and so are not served."""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.datastructures import ResponseHeader
from litestar.openapi.plugins import OpenAPIRenderPlugin, RedocRenderPlugin, YamlRenderPlugin

from agency.services.api.forwarded import forwarded_prefix

REDOC_JS = "/console/vendor/redoc/redoc.standalone.js"
NO_ICON = '<link rel="icon" href="data:,">'
# Redoc's page is one inline script and inline styles over the bundle; its search runs in
# a worker made from a blob.
ONLY_THIS_HOST = ResponseHeader(
    name="Content-Security-Policy",
    value=(
        "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' "
        "'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; worker-src 'self' "
        "blob:; connect-src 'self'"
    ),
)


class _Redoc(RedocRenderPlugin):
    """Redoc's page, its bundle under the path a trusted proxy serves Agency at."""

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        html = super().render(request, openapi_schema)
        if prefix := forwarded_prefix(request.scope):
            html = html.replace(f'src="{REDOC_JS}"'.encode(), f'src="{prefix}{REDOC_JS}"'.encode())
        return html


def schema_pages() -> list[OpenAPIRenderPlugin]:
    """The render plugins of `OpenAPIConfig`: Redoc on the vendored bundle, and YAML."""
    return [
        _Redoc(path=["/", "/redoc"], js_url=REDOC_JS, google_fonts=False, favicon=NO_ICON),
        YamlRenderPlugin(),
    ]
