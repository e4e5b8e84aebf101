"""A URL a tenant names that no connection made for it may reach (`services/egress.py`):
the request is well formed, the operator's rule forbids it, so the answer is a 403 naming
the field and the rule (`AGENCY_ALLOW_HOSTS`), not a 400. Names are checked on connecting."""

from __future__ import annotations

from litestar.exceptions import PermissionDeniedException

from agency.services.egress import refusal


def refuse_unreachable(field: str, url: str) -> None:
    """A 403 when `url`, as written, names an address no tenant's connection may reach."""
    if (problem := refusal(url)) is not None:
        raise PermissionDeniedException(f"field '{field}': {problem}")
