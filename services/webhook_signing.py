"""Run webhooks: what the API checks when a run names one, and how a delivery is signed.

A run may name a URL (`webhook`) that its end is POSTed to (`services/webhooks/`). The
URL meets the egress rule of every connection made for a tenant (`egress.py`: public
addresses only, unless `AGENCY_ALLOW_HOSTS` allows). Each POST is signed with the
operator's secret `AGENCY_WEBHOOK_SECRET`: the header `X-Agency-Signature: t=<unix
seconds>,v1=<hex>` holds the HMAC-SHA256 of `<t>.<body>`, so a receiver checks both the
body and how old it is. Without the secret no run may name a webhook.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping

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
