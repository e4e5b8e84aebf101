"""What an A2A push notification's POST carries besides its body: the config's
authentication as `Authorization` (`<scheme> <credentials>`) and its token in
`X-A2A-Notification-Token`, as the A2A SDKs send them. The API seals these values under
the names here; the webhooks service opens them on each attempt. A push's deliveries are
rows of `webhook_deliveries` of kind `PUSH_KIND`, the config named by `push_key`."""

from __future__ import annotations

TOKEN_NAME, SCHEME_NAME, CREDENTIALS_NAME = "token", "scheme", "credentials"
TOKEN_HEADER = "X-A2A-Notification-Token"
A2A_JSON = "application/a2a+json"
PUSH_KIND = "a2a.push"


def push_key(task_id: str, config_id: str) -> str:
    """A push config as a delivery's subscription (task ids hold no `/`)."""
    return f"{task_id}/{config_id}"


def push_headers(sealed: dict[str, str]) -> dict[str, str]:
    """The headers of a push config's POST, from its opened values."""
    headers = {"Content-Type": A2A_JSON}
    if token := sealed.get(TOKEN_NAME):
        headers[TOKEN_HEADER] = token
    scheme, credentials = sealed.get(SCHEME_NAME), sealed.get(CREDENTIALS_NAME)
    if scheme and credentials:
        headers["Authorization"] = f"{scheme} {credentials}"
    return headers
