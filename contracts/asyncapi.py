"""The AsyncAPI 3.0 document of every subject we publish or accept (`contracts/schema.py`
writes it beside the JSON Schema of each message type)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from agency.contracts.codec import COMMAND_TYPES, EVENT_TYPES
from agency.contracts.commands import Command, CommandEnvelope
from agency.contracts.envelope import Envelope
from agency.contracts.envelope_schema import JsonObject, narrowed
from agency.contracts.events import Event
from agency.contracts.ids import MAX_TOKEN_LENGTH
from agency.contracts.subjects import (
    AGGREGATES,
    COMMANDS_STREAM,
    EVENT_TYPE_HEADER,
    EVENTS_STREAM,
    event_token,
)
from agency.contracts.version import package_version

ASYNCAPI_VERSION = "3.0.0"
TITLE = "Agency"

_COMPONENTS_REF = "#/components/schemas/{name}"

TOKEN_PATTERN = f"^[A-Za-z0-9_-]{{1,{MAX_TOKEN_LENGTH}}}$"
_TOKEN_RULE = (
    f"A subject token: 1 to {MAX_TOKEN_LENGTH} characters of letters, digits, '-' and '_' "
    f"(pattern {TOKEN_PATTERN}); no '.', '*', '>' or whitespace."
)

# Kept in step with infra/jetstream/deadletter.py by a test: contracts must not import infra,
# which pulls in the NATS client.
DEAD_LETTER_HEADERS: dict[str, str] = {
    "Agency-Dlq-Reason": "Why the message was dead-lettered; the same as the {reason} token.",
    "Agency-Dlq-Detail": "Human-readable detail, at most 2000 characters, newlines as spaces.",
    "Agency-Dlq-Subject": "The subject the message was originally published on.",
    "Agency-Dlq-Stream": "The stream the message came from; the same as the {stream} token.",
    "Agency-Dlq-Stream-Seq": "The message's sequence in that stream (decimal).",
    "Agency-Dlq-Consumer": "The durable consumer that gave up on it.",
    "Agency-Dlq-Deliveries": "How many times it was delivered before giving up (decimal).",
    "Nats-Msg-Id": (
        "`<stream>:<stream seq>:<consumer>`, so one source message is dead-lettered once."
    ),
}

_GUARANTEES = f"""\
Every subject starts with `tenant.<tenantId>.`, so NATS credentials can confine a tenant to
`tenant.<tenantId>.>`. Bodies are JSON; each message type has a JSON Schema of its own.

Events (stream `{EVENTS_STREAM}`) are facts and are never deleted. An aggregate instance is one
subject, `tenant.<tenantId>.evt.<aggregate>.<aggregateId>`; each event carries its type in the
envelope and in the `{EVENT_TYPE_HEADER}` header. Its events are stored in strict order, and
the envelope's `seq` counts them 1, 2, 3, ... with no gaps and no duplicates. Appends carry
`Nats-Expected-Last-Subject-Sequence` on that subject, so exactly one writer wins each
position; several events of one decision are appended atomically (all or none). There is no
ordering promise between aggregates. Delivery to consumers is at least once: deduplicate on
`event_id`, or on (`aggregate`, `aggregate_id`, `seq`). `version` is the payload's schema
version at the time it was written; stored events are never rewritten.

A deployment may spread its events over N streams (`AGENCY_EVENT_PARTITIONS`, docs/scaling.md).
With N > 1, an aggregate's partition is p = FNV-1a-32(aggregateId) mod N (the hash of NATS's
`{{{{partition(N, ...)}}}}` subject mapping), its subject
`tenant.<tenantId>.evt.<p>.<aggregate>.<aggregateId>` and its stream `{EVENTS_STREAM}_<p>`;
`tenant.<tenantId>.evt.>` still matches every event of the tenant.

Commands (stream `{COMMANDS_STREAM}`, work-queue retention) are intents that the owning service
may reject. A tenant publishes them on `tenant.<tenantId>.cmd.<service>.<verb>` in any layout:
with N partitions the system stores each in `{COMMANDS_STREAM}_<p>` on
`tenant.<tenantId>.cmd.<p>.<service>.<verb>`, p the partition of its thread (else its agency,
else its tenant), as for events. `Nats-Msg-Id` carries `<tenantId>:<type>:<idempotency_key>`,
so the broker stores a repeated command once within its duplicate window (2 minutes by
default); beyond the window the service recognises the repeat from the `idempotency_key`
recorded on the events it produced. A command is delivered at least once and applied once;
one that is rejected, or still fails after its retries, goes to the dead-letter stream with
its reason.
"""


def asyncapi_document() -> JsonObject:
    """The AsyncAPI 3.0.0 description of every subject we publish or accept."""
    channels: JsonObject = {}
    operations: JsonObject = {}
    messages: JsonObject = {}
    events = sorted((tag, cls.__name__) for tag, cls in EVENT_TYPES.items())
    channels["events"] = _event_channel([name for _, name in events])
    for tag, cls in sorted(EVENT_TYPES.items()):
        messages[cls.__name__] = _message(tag, cls.__name__, "EventHeaders", cls.__doc__)
    operations["receive_events"] = _operation("receive", "events", *(n for _, n in events))
    channels["note_run_canceled"] = _note_channel("run.canceled", "RunCanceled")
    operations["receive_note_run_canceled"] = _operation(
        "receive", "note_run_canceled", "RunCanceled"
    )
    for tag, cmd in sorted(COMMAND_TYPES.items()):
        channel_id = f"command_{cmd.service}_{cmd.verb}"
        channels[channel_id] = _command_channel(tag, cmd.service, cmd.verb, cmd.__name__)
        messages[cmd.__name__] = _message(tag, cmd.__name__, "CommandHeaders", cmd.__doc__)
        operations[f"send_{channel_id}"] = _operation("send", channel_id, cmd.__name__)
    channels["dead_letters"] = _dead_letter_channel()
    messages["DeadLetter"] = _dead_letter_message()
    operations["receive_dead_letters"] = _operation("receive", "dead_letters", "DeadLetter")
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {"title": TITLE, "version": package_version(), "description": _GUARANTEES},
        "defaultContentType": "application/json",
        "servers": {"nats": _server()},
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": _asyncapi_schemas(),
            "messages": messages,
            "parameters": _parameters(),
        },
    }


def _server() -> JsonObject:
    return {
        "host": "{host}",
        "protocol": "nats",
        "description": "A NATS server with JetStream; the streams are provisioned by Agency.",
        "variables": {
            "host": {"default": "localhost:4222", "description": "host:port of the server"}
        },
    }


def _parameters() -> JsonObject:
    def token(what: str) -> JsonObject:
        return {"description": f"{what}. {_TOKEN_RULE}", "x-pattern": TOKEN_PATTERN}

    return {
        "tenantId": token("The tenant that owns the message"),
        "aggregate": {
            "enum": sorted(AGGREGATES),
            "description": "The kind of aggregate the event belongs to.",
        },
        "aggregateId": token("The aggregate instance (for a thread, its thread id)"),
        "stream": {
            "description": (
                f"The stream the dead-lettered message came from: `{COMMANDS_STREAM}` or "
                f"`{EVENTS_STREAM}`, with N partitions the partition's (`_<p>` after it)."
            ),
            "x-pattern": f"^({COMMANDS_STREAM}|{EVENTS_STREAM})(_[0-9]+)?$",
        },
        "reason": token(
            "Why it was dead-lettered: `exhausted` (retries used up), `undecodable`, "
            "`projection_failed`, or the reason code of a rejected command"
        ),
    }


def _param_refs(*names: str) -> JsonObject:
    return {name: {"$ref": f"#/components/parameters/{name}"} for name in names}


def _event_channel(names: list[str]) -> JsonObject:
    return {
        "address": "tenant.{tenantId}.evt.{aggregate}.{aggregateId}",
        "title": "events",
        "description": (
            f"Every event of one aggregate instance, in order, in stream `{EVENTS_STREAM}`. "
            f"The type is in the envelope and in the `{EVENT_TYPE_HEADER}` header: a reader "
            "that wants some types filters on the header without decoding the rest."
        ),
        "parameters": _param_refs("tenantId", "aggregate", "aggregateId"),
        "messages": {name: {"$ref": f"#/components/messages/{name}"} for name in names},
    }


def _note_channel(tag: str, message: str) -> JsonObject:
    return {
        "address": f"tenant.{{tenantId}}.note.{event_token(tag)}",
        "title": f"{tag} notes",
        "description": (
            f"Plain NATS, in no stream: each `{tag}` event, once appended, is also published "
            "here (the same body), at most once, for listeners that act on it at once. The "
            "log stays the truth: read the aggregate for what a missed note said."
        ),
        "parameters": _param_refs("tenantId"),
        "messages": {message: {"$ref": f"#/components/messages/{message}"}},
    }


def _command_channel(tag: str, service: str, verb: str, message: str) -> JsonObject:
    return {
        "address": f"tenant.{{tenantId}}.cmd.{service}.{verb}",
        "title": tag,
        "description": (
            f"`{tag}` commands to the `{service}` service, in the work-queue stream "
            f"`{COMMANDS_STREAM}`. Publish with JetStream and wait for the ack; resending with "
            "the same idempotency key is safe."
        ),
        "parameters": _param_refs("tenantId"),
        "messages": {message: {"$ref": f"#/components/messages/{message}"}},
    }


def _dead_letter_channel() -> JsonObject:
    return {
        "address": "dlq.{stream}.{reason}",
        "title": "dead letters",
        "description": (
            "Messages that could not be processed, with why in the headers. Nothing is lost: "
            "the original body is kept unchanged."
        ),
        "parameters": _param_refs("stream", "reason"),
        "messages": {"DeadLetter": {"$ref": "#/components/messages/DeadLetter"}},
    }


def _message(tag: str, name: str, headers: str, doc: str | None) -> JsonObject:
    message: JsonObject = {
        "name": tag,
        "title": name,
        "contentType": "application/json",
        "headers": {"$ref": _COMPONENTS_REF.format(name=headers)},
        "payload": {"$ref": _COMPONENTS_REF.format(name=_envelope_name(name))},
    }
    if doc:
        message["summary"] = doc.strip().splitlines()[0]
    return message


def _dead_letter_message() -> JsonObject:
    return {
        "name": "dead_letter",
        "title": "DeadLetter",
        "summary": "A message that could not be processed, as it was received.",
        "contentType": "application/octet-stream",
        "headers": {"$ref": _COMPONENTS_REF.format(name="DeadLetterHeaders")},
        "payload": {
            "description": (
                "The original message body, byte for byte: usually an event or command "
                "envelope, but possibly not JSON at all (often the reason it is here)."
            )
        },
    }


def _operation(action: str, channel_id: str, *messages: str) -> JsonObject:
    return {
        "action": action,
        "channel": {"$ref": f"#/channels/{channel_id}"},
        "messages": [{"$ref": f"#/channels/{channel_id}/messages/{m}"} for m in messages],
    }


def _envelope_name(payload: str) -> str:
    return f"{payload}Envelope"


def _asyncapi_schemas() -> JsonObject:
    (_, _), schemas = msgspec.json.schema_components(
        [Envelope, CommandEnvelope], ref_template=_COMPONENTS_REF
    )
    narrowed = {
        **_narrowed_envelopes(schemas["Envelope"], EVENT_TYPES, "event"),
        **_narrowed_envelopes(schemas["CommandEnvelope"], COMMAND_TYPES, "command"),
    }
    if taken := set(narrowed) & set(schemas):
        raise ValueError(f"schema names {sorted(taken)} are taken twice; rename the structs")
    schemas |= narrowed | _header_schemas()
    return {name: _asyncapi_compatible(schemas[name]) for name in sorted(schemas)}


def _narrowed_envelopes(
    envelope: JsonObject, types: Mapping[str, type[Event] | type[Command]], kind: str
) -> JsonObject:
    return {
        _envelope_name(cls.__name__): narrowed(
            envelope, tag, cls.schema_version, cls.__name__, _COMPONENTS_REF, kind
        )
        for tag, cls in types.items()
    }


def _asyncapi_compatible(node: Any) -> Any:
    """`node` without msgspec's OpenAPI-style discriminator objects.

    AsyncAPI's `discriminator` is a bare property name that must be defined and required on the
    schema carrying it, which an `anyOf` of tagged structs is not; each variant's `type` enum
    already tells them apart.
    """
    if isinstance(node, dict):
        return {
            key: _asyncapi_compatible(value)
            for key, value in node.items()
            if not (key == "discriminator" and isinstance(value, dict))
        }
    if isinstance(node, list):
        return [_asyncapi_compatible(item) for item in node]
    return node


def _headers(properties: Mapping[str, str], required: list[str]) -> JsonObject:
    return {
        "type": "object",
        "properties": {
            name: {"type": "string", "description": text} for name, text in properties.items()
        },
        "required": required,
    }


def _header_schemas() -> JsonObject:
    trace = {
        "traceparent": "W3C trace context of the sender, when it traces.",
        "tracestate": "W3C trace state that goes with traceparent.",
    }
    events = {
        EVENT_TYPE_HEADER: (
            "The event's type (as in the envelope), on every event: filter on it to take "
            "some types of an aggregate's events without decoding the others."
        ),
        "Nats-Msg-Id": (
            "Idempotency of the append: the event_id, or "
            "`<aggregateId>:<idempotency_key>:<index>` when a command produced the event, "
            "so a retried append is stored once within the duplicate window."
        ),
        "Nats-Expected-Last-Subject-Sequence": (
            "On appends: the stream sequence of the aggregate's last event (0 for none); the "
            "server rejects the append (error 10071) if another writer got there first."
        ),
        "Nats-Batch-Id": "On atomic appends of several events: the batch they belong to.",
        "Nats-Batch-Sequence": "On atomic appends: position in the batch, from 1.",
        "Nats-Batch-Commit": "On atomic appends: `1` on the batch's last message.",
    }
    commands = {
        "Nats-Msg-Id": (
            "`<tenantId>:<type>:<idempotency_key>`: the broker stores a repeated command "
            "once within its duplicate window."
        ),
        **trace,
    }
    return {
        "EventHeaders": {
            **_headers(events, [EVENT_TYPE_HEADER]),
            "description": (
                "Headers of an event. Trace context travels in the envelope's `trace` field."
            ),
        },
        "CommandHeaders": _headers(commands, ["Nats-Msg-Id"]),
        "DeadLetterHeaders": _headers(DEAD_LETTER_HEADERS, list(DEAD_LETTER_HEADERS)),
    }
