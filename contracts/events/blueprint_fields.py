"""The checked field types of a blueprint, and the base of its config sections."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec


@dataclass(frozen=True)
class Checked:
    """A field's rule where a blueprint comes in from a client (`services/api/blueprint_body.py`
    derives the HTTP body from these structs), not where a stored event is read: events
    stored before the rule, or through a path that did not check it, still decode. `meta`
    takes the place of the field's own `msgspec.Meta` there; `required` makes a field with
    a default required there; `operator` leaves the field out (the operator's only)."""

    meta: msgspec.Meta | None = None
    required: bool = False
    operator: bool = False


Positive = Annotated[int, msgspec.Meta(ge=1)]
CheckedPositive = Annotated[int, Checked(msgspec.Meta(ge=1))]
# A blueprint's own name: it is in paths and subjects.
Token = Annotated[
    str, Checked(msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$"))
]
Name = Annotated[str, Checked(msgspec.Meta(min_length=1, max_length=200))]
Label = Annotated[str, Checked(msgspec.Meta(max_length=200))]
Icon = Annotated[str, Checked(msgspec.Meta(max_length=2000))]
ModelName = Annotated[str, Checked(msgspec.Meta(max_length=200))]
HookId = Annotated[
    str, Checked(msgspec.Meta(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/@-]+$"))
]
Hooks = Annotated[tuple[HookId, ...], Checked(msgspec.Meta(max_length=100))]
# npm's rule for package names: lower case, optionally scoped (`@scope/name`).
PackageName = Annotated[
    str,
    Checked(
        msgspec.Meta(
            max_length=214, pattern=r"^$|^(@[a-z0-9-~][a-z0-9-._~]*/)?[a-z0-9-~][a-z0-9-._~]*$"
        )
    ),
]
# Semantic versioning: MAJOR.MINOR.PATCH, optionally -prerelease and +build.
SemVer = Annotated[
    str,
    Checked(
        msgspec.Meta(
            max_length=100,
            pattern=r"^$|^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
            r"(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$",
        )
    ),
]
_ENV_NAME = msgspec.Meta(min_length=1, max_length=200, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
EnvName = Annotated[str, _ENV_NAME]
# A blueprint's `env`: its names are checked as `EnvName`s where a blueprint comes in only
# (blueprints stored before the rule hold other names, and still read).
EnvValue = Annotated[str, Checked(msgspec.Meta(max_length=10_000))]
Env = Annotated[
    dict[Annotated[str, Checked(_ENV_NAME)], EnvValue], Checked(msgspec.Meta(max_length=200))
]
# Free-form labels of a blueprint, for clients (a LangGraph assistant's `metadata`, and its
# `config` and `context` under `langgraph`): JSON values, read back as they were saved.
BlueprintMetadata = Annotated[
    dict[Annotated[str, msgspec.Meta(min_length=1, max_length=200)], Any],
    Checked(msgspec.Meta(max_length=100)),
]


class Config(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """Base of blueprint config sections: an unknown key is an error, not silently dropped."""


PropertyName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
]


McpServerName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9-]{1,32}$")]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=3600)]
# A blueprint from a client names streamable HTTP servers only; a header value naming the
# environment (`${ENV:NAME}`) is the operator's.
# An http(s) URL with a host (no user part), an optional port from 0 to 65535, then
# anything but an ASCII control character: what the API reads as a URL
# (`services/url_form.py`).
_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
_H = "[0-9A-Fa-f]{1,4}"
# An IPv6 address as Python's `ipaddress` reads it (the full and the compressed forms).
_IPV6 = (
    rf"(({_H}:){{7}}{_H}|({_H}:){{1,7}}:|({_H}:){{1,6}}:{_H}|({_H}:){{1,5}}(:{_H}){{1,2}}"
    rf"|({_H}:){{1,4}}(:{_H}){{1,3}}|({_H}:){{1,3}}(:{_H}){{1,4}}|({_H}:){{1,2}}(:{_H}){{1,5}}"
    rf"|{_H}:(:{_H}){{1,6}}|:((:{_H}){{1,7}}|:))"
)
# A name (RFC 3986's reg-name characters), an IPv4 address, or a bracketed IPv6 one.
_HOST = rf"(\[{_IPV6}\]|[A-Za-z0-9\-._~%!$&'()*+,;=]+)"
_REST = r"[^\x00-\x1f\x7f]*"
URL_WITH_HOST = rf"^https?://{_HOST}(:{_PORT})?([/?#]{_REST})?$"
# The same, https only, or nothing (a tenant's model provider's base URL).
HTTPS_URL_OR_NONE = rf"^(https://{_HOST}(:{_PORT})?([/?#]{_REST})?)?$"
HttpUrl = Annotated[
    str, Checked(msgspec.Meta(pattern=URL_WITH_HOST, max_length=2000), required=True)
]
HeaderValue = Annotated[str, Checked(msgspec.Meta(pattern=r"^(?!.*\$\{ENV:)"))]
