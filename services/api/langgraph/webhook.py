"""A run's `webhook`, checked before the run starts (`services/webhook_signing.py`): a
malformed URL or webhooks switched off is a 400; an address the egress rule refuses is a
403, as for every URL a tenant names (`services/api/egress_door.py`)."""

from __future__ import annotations

from litestar.exceptions import PermissionDeniedException, ValidationException

from agency.services.egress import VARIABLE as ALLOW_HOSTS, refusal
from agency.services.webhook_signing import SECRET_VARIABLE, secret, url_form_problem


def webhook_of(url: str | None) -> str | None:
    """The URL, or a 400 or 403 saying why no run may name it."""
    if url is None:
        return None
    if (form := url_form_problem(url)) is not None:
        raise ValidationException(f"webhook {url[:80]!r} is refused: {form}")
    problem = refusal(url)
    if problem is not None:
        raise PermissionDeniedException(
            f"webhook {url[:80]!r} is refused: {problem} (the operator allows hosts with "
            f"`{ALLOW_HOSTS}`)"
        )
    if secret() is None:
        raise ValidationException(
            f"webhooks are off: the operator has not set `{SECRET_VARIABLE}`, the secret "
            "that signs them"
        )
    return url
