"""Webhooks' URLs and signatures, for the API that takes them and the service that POSTs.

Subscriptions of an agency (`services/webhooks/`, docs/protocols.md) follow Standard
Webhooks: each has its own secret, `whsec_<base64 of 24 random bytes>`, and each delivery
carries `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64 of the
HMAC-SHA256 of "<id>.<timestamp>.<body>">` (`standard_headers`). Their URLs meet the egress
rule when subscribed (`url_problem`) and again on each connection.

Run webhooks (LangGraph's `webhook` on a run) are older and simpler:

A run may name a URL (`webhook`) that its end is POSTed to (`services/webhooks/`). The
URL meets the egress rule of every connection made for a tenant (`egress.py`: public
addresses only, unless `AGENCY_ALLOW_HOSTS` allows). Each POST is signed with the
operator's secret `AGENCY_WEBHOOK_SECRET`: the header `X-Agency-Signature: t=<unix
seconds>,v1=<hex>` holds the HMAC-SHA256 of `<t>.<body>`, so a receiver checks both the
body and how old it is. Without the secret no run may name a webhook.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping

from agency.services import url_form
from agency.services.egress import refusal

SECRET_VARIABLE = "AGENCY_WEBHOOK_SECRET"
SIGNATURE_HEADER = "X-Agency-Signature"
EVENT_HEADER = "X-Agency-Event-Id"
MAX_URL = 2000


def secret(environ: Mapping[str, str] | None = None) -> str | None:
    value = (os.environ if environ is None else environ).get(SECRET_VARIABLE, "").strip()
    return value or None


def signature(body: bytes, key: str, timestamp: int) -> str:
    """The signature header's value for `body` sent at `timestamp`."""
    mac = hmac.new(key.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(body: bytes, header: str, key: str) -> bool:
    """Whether `header` signs `body` with `key` (for receivers and tests)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    if not parts.get("t", "").isdigit():
        return False
    return hmac.compare_digest(signature(body, key, int(parts["t"])), header)


SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A subscription's secret in the Standard Webhooks form."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def standard_signature(secret_text: str, message_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256>` of `<id>.<timestamp>.<body>` under the `whsec_` secret."""
    key = base64.b64decode(secret_text.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def standard_headers(
    secret_text: str, message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The headers of one Standard Webhooks delivery."""
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": standard_signature(secret_text, message_id, timestamp, body),
    }


def url_problem(url: str) -> str | None:
    """Why a webhook URL is refused as written (its form, or an address no connection
    made for a tenant may reach), or None; names are checked on connecting."""
    return url_form_problem(url) or refusal(url)


def url_form_problem(url: str) -> str | None:
    """What is wrong with a webhook URL's form (its length, a control character, its
    scheme, no host, a port that does not read), or None."""
    return url_form.url_form_problem(url, ("http", "https"), MAX_URL)
