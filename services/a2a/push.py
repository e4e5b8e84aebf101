"""What an A2A push notification's POST carries besides its body: the config's
authentication as `Authorization` (`<scheme> <credentials>`) and its token in
`X-A2A-Notification-Token`, as the A2A SDKs send them. The API seals these values under
the names here; the webhooks service opens them on each attempt."""

from __future__ import annotations

TOKEN_NAME, SCHEME_NAME, CREDENTIALS_NAME = "token", "scheme", "credentials"
TOKEN_HEADER = "X-A2A-Notification-Token"
A2A_JSON = "application/a2a+json"


def push_headers(sealed: dict[str, str]) -> dict[str, str]:
    """The headers of a push config's POST, from its opened values."""
    headers = {"Content-Type": A2A_JSON}
    if token := sealed.get(TOKEN_NAME):
        headers[TOKEN_HEADER] = token
    scheme, credentials = sealed.get(SCHEME_NAME), sealed.get(CREDENTIALS_NAME)
    if scheme and credentials:
        headers["Authorization"] = f"{scheme} {credentials}"
    return headers
