"""What a tenant may ask of a consumer on the events stream, checked field by field.

A tenant's account reaches `$JS.API.CONSUMER.CREATE` only through the gateway
(`infra/nats_accounts.py`), which forwards a request this module has accepted. A consumer
a tenant creates:

- reads only its own events: every filter lies under `tenant.<t>.evt.`, and names at most
  an aggregate instance (`tenant.<t>.evt.<aggregate>.<id>`, one subject per instance): a
  filter of the previous layout (a type token after the id) would match nothing, so it is
  refused with where the type now is (the `Agency-Event-Type` header);
- pushes only to its own inbox prefix (`_INBOX_<t>.`): never another tenant's inbox, a
  command subject, the dead letters, a bucket or the JetStream API;
- takes no acknowledgements and no flow control (both answer on `AGENCY`'s subjects) and
  removes itself when unused (`inactive_threshold`, at most an hour);
- carries its tenant in its metadata, so a name another tenant or a service holds is never
  updated by it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agency.contracts.ids import is_valid_token
from agency.contracts.subjects import EVENT_TYPE_HEADER, EVENTS_STREAM
from agency.infra.nats_accounts import inbox_prefix

OWNER_KEY = "agency_tenant"
# `tenant.<t>.evt.<aggregate>.<id>`: no event subject is deeper.
_AGGREGATE_TOKENS = 5
MAX_INACTIVE_NS = 3600 * 1_000_000_000
_FIELDS = frozenset(
    {
        "name",
        "durable_name",
        "description",
        "deliver_policy",
        "opt_start_seq",
        "opt_start_time",
        "ack_policy",
        "ack_wait",
        "max_deliver",
        "backoff",
        "filter_subject",
        "filter_subjects",
        "replay_policy",
        "rate_limit_bps",
        "sample_freq",
        "max_ack_pending",
        "flow_control",
        "idle_heartbeat",
        "headers_only",
        "deliver_subject",
        "deliver_group",
        "inactive_threshold",
        "metadata",
        "pause_until",
    }
)


class Refused(Exception):
    """A request the gateway answers with a JetStream API error instead of forwarding."""

    def __init__(self, description: str, *, code: int = 400) -> None:
        super().__init__(description)
        self.code = code
        self.description = description


class CreateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """`$JS.API.CONSUMER.CREATE`'s body, its config kept as sent for the checks."""

    stream_name: str
    config: dict[str, Any]
    action: str = ""


_decoder = msgspec.json.Decoder(CreateRequest)


def _plain_subject(value: object) -> bool:
    return isinstance(value, str) and all(is_valid_token(t) for t in value.split("."))


def _own_filter(tenant: str, value: object) -> bool:
    if not isinstance(value, str):
        return False
    tokens = value.split(".")
    if tokens[:3] != ["tenant", tenant, "evt"] or len(tokens) < 4:
        return False
    rest = tokens[3:]
    if "" in rest or any(t == ">" for t in rest[:-1]):
        return False
    return all(t in ("*", ">") or is_valid_token(t) for t in rest)


def checked_create(
    tenant: str, name: str, data: bytes, stream: str = EVENTS_STREAM, partition: int = 0
) -> CreateRequest:
    """The request as it may be forwarded (its metadata naming the tenant), or `Refused`.

    `stream`: the events stream the request came in for (partition `partition`'s, on a
    log of several: its filters then name that partition after `evt`)."""
    try:
        request = _decoder.decode(data)
    except msgspec.DecodeError as e:
        raise Refused(f"not a consumer create request: {e}") from None
    if request.stream_name != stream:
        raise Refused(f"consumers are created on {stream} only")
    partitioned = stream != EVENTS_STREAM
    config = request.config
    if unknown := sorted(set(config) - _FIELDS):
        raise Refused(f"consumer fields not allowed: {', '.join(unknown)}")
    if not is_valid_token(name) or config.get("name", name) != name:
        raise Refused("the consumer's name must be its create subject's name token")
    if config.get("durable_name", name) != name:
        raise Refused("durable_name must equal name")
    filters = config.get("filter_subjects") or [config.get("filter_subject")]
    under = f"tenant.{tenant}.evt." + (f"{partition}." if partitioned else "")
    if not isinstance(filters, list) or not all(
        _own_filter(tenant, f) and f.startswith(under) for f in filters
    ):
        raise Refused(f"every filter must lie under {under}")
    tokens = _AGGREGATE_TOKENS + (1 if partitioned else 0)
    if deeper := [f for f in filters if len(f.split(".")) > tokens]:
        raise Refused(
            f"filter {deeper[0]} names more than an aggregate: events are on one subject per "
            f"aggregate instance, tenant.{tenant}.evt.<aggregate>.<id>; the event type is in "
            f"the {EVENT_TYPE_HEADER} header, filter on it in the client"
        )
    deliver = config.get("deliver_subject")
    if not (_plain_subject(deliver) and str(deliver).startswith(inbox_prefix(tenant) + ".")):
        raise Refused(
            f"deliver_subject is required and lies under {inbox_prefix(tenant)}. "
            "(push consumers only)"
        )
    if config.get("ack_policy", "explicit") != "none":
        raise Refused('ack_policy must be "none"')
    if config.get("flow_control"):
        raise Refused("flow_control is not available to tenants' consumers")
    group = config.get("deliver_group")
    if group is not None and not is_valid_token(group):
        raise Refused("deliver_group must be a plain token")
    inactive = config.get("inactive_threshold")
    if not isinstance(inactive, int) or not 0 < inactive <= MAX_INACTIVE_NS:
        raise Refused("inactive_threshold is required, at most one hour")
    metadata = config.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise Refused("metadata must be an object")
    owned = {**metadata, OWNER_KEY: tenant}
    return msgspec.structs.replace(request, config={**config, "name": name, "metadata": owned})


def owner(info: dict[str, Any]) -> str | None:
    """The tenant a consumer belongs to, from `$JS.API.CONSUMER.INFO`'s answer."""
    metadata = (info.get("config") or {}).get("metadata") or {}
    value = metadata.get(OWNER_KEY)
    return value if isinstance(value, str) else None
