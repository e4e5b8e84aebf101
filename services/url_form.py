"""The form of a URL a tenant names for the system to call (a webhook, a push
notification's receiver, a model provider's base URL): checked when it is saved, so no
later call fails on it. Where its address may lead is the egress rule's (`egress.py`).

The HTTP clients refuse a URL holding an ASCII control character (`\\x00`-`\\x1f`,
`\\x7f`); `urllib` reads such a URL, so it is refused here by name. The document's pattern
for these fields (`contracts/events/blueprint_fields.py` `URL_WITH_HOST`) says the same.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def url_form_problem(url: str, schemes: tuple[str, ...], max_length: int) -> str | None:
    """What is wrong with the URL's form (its length, a control character, a scheme not
    in `schemes`, no host, a port that does not read), or None."""
    if len(url) > max_length:
        return f"the URL is longer than {max_length} characters"
    if (control := _CONTROL.search(url)) is not None:
        return f"the URL holds a control character ({control.group()!r}) at {control.start()}"
    try:
        parts = urlsplit(url)
        hostname, _ = parts.hostname, parts.port
    except ValueError as e:
        return f"the URL cannot be read: {e}"
    if parts.scheme not in schemes or not hostname:
        named = "http(s)" if set(schemes) == {"http", "https"} else "/".join(schemes)
        return f"only {named} URLs with a host are allowed"
    return None
