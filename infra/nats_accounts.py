"""The broker's accounts: what the services' account exports to each tenant's account.

A tenant's user lives in an account of its own (`tenant_<t>`); the streams, the services
and the admin live in `AGENCY`. An account sees only its own subjects and what it imports,
so the wall between tenants is the server's, not a list of subjects to deny. Each tenant's
account imports from `AGENCY`, and `AGENCY` exports to that one account only:

- stream `tenant.<t>.evt.>`: its events, live;
- stream `_INBOX_<t>.>`: what its consumers push to its inbox prefix;
- service `tenant.<t>.cmd.>`, answered by the gateway at `gw.<t>.cmd.>`;
- service `agency.api.CONSUMER.CREATE.AGENCY_EVENTS.>`, the gateway at `gw.<t>.consumer.>`;
- service `agency.api.DIRECT.GET.AGENCY_EVENTS.tenant.<t>.evt.>`, JetStream's direct get
  of the same subjects (`$JS.API.DIRECT.GET.…`): the last event of one of its aggregates
  (one subject per aggregate instance).

A tenant's JetStream client uses the API prefix `agency.api` (nats-py:
`nc.jetstream(prefix="agency.api")`); `$JS.API.>` in its own account is answered by the
server with "JetStream not enabled for account".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import msgspec

from agency.contracts.ids import validate_token
from agency.contracts.partitions import EventLayout
from agency.contracts.subjects import ALL_NOTES, DEAD_LETTER_STREAM, EVENTS_STREAM, REEXECUTIONS
from agency.infra.jetstream.leases import LEASES_BUCKET
from agency.infra.keystore.vault import KEYS_BUCKET
from agency.infra.roles import GATEWAY_ROLE as GATEWAY_ROLE

SERVICES_ACCOUNT = "AGENCY"
JS_API_PREFIX = "agency.api"
# Everything every tenant's account sends to the gateway: `gw.<tenant>.<kind>.<rest>`.
GATEWAY_SUBJECTS = "gw.*.>"

# Reading: stream and consumer information, single messages, consumers and their acks.
_READ_API = [
    "$JS.API.INFO",
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.MSG.GET.*",
    "$JS.API.DIRECT.GET.>",
    "$JS.API.CONSUMER.>",
    "$JS.ACK.>",
    "$JS.FC.>",
]
_WRITE = ["tenant.*.evt.>", ALL_NOTES, "tenant.*.cmd.>", "dlq.>"]
# The key store (`infra/keystore`): every service seals or opens a thread's content, and
# the first to need it creates the bucket; erasing a key deletes its message.
_KEYS = [
    f"$KV.{KEYS_BUCKET}.>",
    f"$JS.API.STREAM.CREATE.KV_{KEYS_BUCKET}",
    f"$JS.API.STREAM.MSG.DELETE.KV_{KEYS_BUCKET}",
]


class Permission(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


class Permissions(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    publish: Permission
    subscribe: Permission
    # May answer the requests it receives (the gateway, for every tenant's account).
    allow_responses: bool = False


def inbox_prefix(tenant: str) -> str:
    return f"_INBOX_{validate_token('tenant id', tenant)}"


def tenant_account(tenant: str) -> str:
    return f"tenant_{validate_token('tenant id', tenant)}"


def event_streams(partitions: int) -> tuple[str, ...]:
    """The events streams of a log of `partitions` partitions (`contracts/partitions.py`)."""
    return EventLayout(partitions).streams


def consumer_kind(stream: str) -> str:
    """The gateway's kind of request creating a consumer on `stream`: `consumer` on the
    one events stream of an unpartitioned log, `consumer_<p>` on partition p's."""
    if stream == EVENTS_STREAM:
        return "consumer"
    return "consumer_" + stream.removeprefix(f"{EVENTS_STREAM}_")


def gateway_subject(tenant: str, kind: str) -> str:
    """What the gateway receives from a tenant's account: `gw.<t>.<kind>.>`."""
    return f"gw.{validate_token('tenant id', tenant)}.{kind}.>"


def service_permissions(role: str, partitions: int = 1) -> Permissions:
    """A service's user in `AGENCY`: only the subjects and API calls its work needs."""
    if role == "projector":
        # Reads the log and writes PostgreSQL; what it cannot project is dead-lettered.
        return Permissions(
            publish=Permission(allow=(*_READ_API, *_KEYS, "dlq.>")),
            subscribe=Permission(allow=("_INBOX.>", "tenant.*.evt.>")),
        )
    if role == GATEWAY_ROLE:
        # Stores tenants' commands, creates their consumers once checked, dead-letters
        # what it refuses; hears nothing but what tenants' accounts send it.
        consumers = [
            subject
            for stream in event_streams(partitions)
            for subject in (
                f"$JS.API.CONSUMER.CREATE.{stream}.>",
                f"$JS.API.CONSUMER.INFO.{stream}.*",
            )
        ]
        return Permissions(
            publish=Permission(
                allow=(
                    "tenant.*.cmd.>",
                    "dlq.>",
                    *consumers,
                    *_READ_API,
                    *_KEYS,
                )
            ),
            subscribe=Permission(allow=(GATEWAY_SUBJECTS, "_INBOX.>")),
            allow_responses=True,
        )
    allow = [*_WRITE, *_READ_API, *_KEYS]
    hear = ["_INBOX.>", "tenant.*.evt.>", ALL_NOTES, f"$KV.{LEASES_BUCKET}.>"]
    if role == "runtime":
        allow += [
            f"$KV.{LEASES_BUCKET}.>",
            f"$JS.API.STREAM.CREATE.KV_{LEASES_BUCKET}",
            # A new bucket's revisions are moved past the lost one's (`leases.py`).
            f"$JS.API.STREAM.PURGE.KV_{LEASES_BUCKET}",
        ]
        # Answers re-execution requests (the API's console route asks).
        hear.append(REEXECUTIONS)
    if role == "api":
        allow += [f"$JS.API.STREAM.MSG.DELETE.{DEAD_LETTER_STREAM}", REEXECUTIONS]
    return Permissions(
        publish=Permission(allow=tuple(allow)),
        subscribe=Permission(allow=tuple(hear)),
        allow_responses=role == "runtime",
    )


def tenant_permissions(tenant: str, partitions: int = 1) -> Permissions:
    """A tenant's user inside its own account: what its imports give, nothing more. The
    account is the wall; these turn a mistake into a permissions violation the client is
    told of, instead of a request no one answers. On a log of several partitions, the
    same on every partition's stream."""
    t = validate_token("tenant id", tenant)
    streams = [
        subject
        for stream in event_streams(partitions)
        for subject in (
            f"{JS_API_PREFIX}.CONSUMER.CREATE.{stream}.>",
            f"{JS_API_PREFIX}.DIRECT.GET.{stream}.tenant.{t}.evt.>",
        )
    ]
    return Permissions(
        publish=Permission(allow=(f"tenant.{t}.cmd.>", *streams)),
        subscribe=Permission(allow=(f"tenant.{t}.evt.>", f"{inbox_prefix(t)}.>")),
    )


def tenant_exports(tenant: str, partitions: int = 1) -> list[dict[str, Any]]:
    """What `AGENCY` exports to one tenant's account, and to no other."""
    t = validate_token("tenant id", tenant)
    to = [tenant_account(t)]
    return [
        {"stream": f"tenant.{t}.evt.>", "accounts": to},
        {"stream": f"{inbox_prefix(t)}.>", "accounts": to},
        {"service": f"gw.{t}.>", "accounts": to},
        *(
            {"service": f"$JS.API.DIRECT.GET.{stream}.tenant.{t}.evt.>", "accounts": to}
            for stream in event_streams(partitions)
        ),
    ]


def tenant_imports(tenant: str, partitions: int = 1) -> list[dict[str, Any]]:
    """What a tenant's account imports from `AGENCY`, under the subjects its client uses:
    consumers and direct gets on each events stream (one per partition)."""
    t = validate_token("tenant id", tenant)
    source = SERVICES_ACCOUNT
    imports: list[dict[str, Any]] = [
        {"stream": {"account": source, "subject": f"tenant.{t}.evt.>"}},
        {"stream": {"account": source, "subject": f"{inbox_prefix(t)}.>"}},
        {
            "service": {"account": source, "subject": gateway_subject(t, "cmd")},
            "to": f"tenant.{t}.cmd.>",
        },
    ]
    streams = event_streams(partitions)
    for stream in streams:
        imports.append(
            {
                "service": {
                    "account": source,
                    "subject": gateway_subject(t, consumer_kind(stream)),
                },
                "to": f"{JS_API_PREFIX}.CONSUMER.CREATE.{stream}.>",
            }
        )
    for stream in streams:
        direct = f"DIRECT.GET.{stream}.tenant.{t}.evt.>"
        imports.append(
            {
                "service": {"account": source, "subject": f"$JS.API.{direct}"},
                "to": f"{JS_API_PREFIX}.{direct}",
            }
        )
    return imports


class AccountUser(msgspec.Struct, frozen=True, kw_only=True):
    """A user as the server configuration names it."""

    user: str
    password: str
    permissions: Permissions | None = None


def render(
    services: Iterable[AccountUser], tenants: dict[str, AccountUser], partitions: int = 1
) -> str:
    """`accounts { … }` for nats-server: `AGENCY` with the services, one account a tenant
    (its rules on each of the `partitions` events streams)."""
    exports: list[dict[str, Any]] = []
    accounts: dict[str, Any] = {}
    for tenant, user in sorted(tenants.items()):
        exports += tenant_exports(tenant, partitions)
        accounts[tenant_account(tenant)] = {
            "users": [_user(user)],
            "imports": tenant_imports(tenant, partitions),
        }
    agency: dict[str, Any] = {
        "jetstream": "enabled",
        "users": [_user(u) for u in services],
        "exports": exports,
    }
    # JSON is valid nats-server configuration syntax and quotes every value safely.
    return "accounts " + json.dumps({SERVICES_ACCOUNT: agency, **accounts}, indent=1) + "\n"


def _user(user: AccountUser) -> dict[str, Any]:
    entry: dict[str, Any] = {"user": user.user, "password": user.password}
    if user.permissions is not None:
        entry["permissions"] = msgspec.to_builtins(user.permissions)
    return entry
