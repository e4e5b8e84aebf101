"""Machine-readable wire contracts: JSON Schema per message type, and the AsyncAPI 3.0 document
(`contracts/asyncapi.py`).

Another team integrates over NATS from these files alone, without our code.

Each JSON Schema (`events/<type>.json`, `commands/<type>.json`) describes one whole message as
it travels: the envelope with `type` and `version` fixed to that message type and `payload`
narrowed to its one payload struct. Nested structs live in `$defs`, so every file stands alone.
A schema describes the *current* schema version; events stored under an older version keep
their old payload on the wire (our readers upcast them, raw consumers see them as stored).

Everything is derived from the msgspec structs, and the output is deterministic: the same
contracts give byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from agency.contracts.asyncapi import asyncapi_document
from agency.contracts.codec import COMMAND_TYPES, EVENT_TYPES
from agency.contracts.commands import CommandEnvelope
from agency.contracts.envelope import Envelope
from agency.contracts.envelope_schema import JsonObject, narrowed

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_DEFS_REF = "#/$defs/{name}"


def event_schemas() -> dict[str, JsonObject]:
    """One self-contained JSON Schema per event type, keyed by type (sorted)."""
    envelope, defs = _envelope_and_defs(Envelope)
    return {
        tag: _standalone(
            narrowed(envelope, tag, cls.schema_version, cls.__name__, _DEFS_REF, "event"), defs
        )
        for tag, cls in sorted(EVENT_TYPES.items())
    }


def command_schemas() -> dict[str, JsonObject]:
    """One self-contained JSON Schema per command type, keyed by type (sorted)."""
    envelope, defs = _envelope_and_defs(CommandEnvelope)
    return {
        tag: _standalone(
            narrowed(envelope, tag, cls.schema_version, cls.__name__, _DEFS_REF, "command"),
            defs,
        )
        for tag, cls in sorted(COMMAND_TYPES.items())
    }


def _envelope_and_defs(envelope_type: type[msgspec.Struct]) -> tuple[JsonObject, JsonObject]:
    (_,), defs = msgspec.json.schema_components([envelope_type], ref_template=_DEFS_REF)
    return defs[envelope_type.__name__], defs


def _standalone(root: JsonObject, defs: Mapping[str, JsonObject]) -> JsonObject:
    return {"$schema": JSON_SCHEMA_DIALECT, **root, "$defs": _reachable(root, defs)}


def _reachable(root: JsonObject, defs: Mapping[str, JsonObject]) -> JsonObject:
    """The definitions `root` refers to, directly or through each other, sorted by name."""
    prefix = _DEFS_REF.format(name="")
    seen: set[str] = set()
    pending = [ref.removeprefix(prefix) for ref in _refs(root)]
    while pending:
        name = pending.pop()
        if name not in seen:
            seen.add(name)
            pending.extend(ref.removeprefix(prefix) for ref in _refs(defs[name]))
    return {name: defs[name] for name in sorted(seen)}


def _refs(node: Any) -> Iterator[str]:
    """Every `$ref` value anywhere in a JSON document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def render(document: JsonObject) -> bytes:
    """Sorted keys, two-space indent, UTF-8, trailing newline: diff-friendly and stable."""
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def write_schemas(out: Path) -> list[Path]:
    """Write `events/<type>.json`, `commands/<type>.json` and `asyncapi.json` under `out`.

    Files of types that no longer exist are left alone; regenerate into a fresh directory to
    drop them. Returns the paths written, sorted.
    """
    documents: dict[Path, JsonObject] = {out / "asyncapi.json": asyncapi_document()}
    for folder, schemas in (("events", event_schemas()), ("commands", command_schemas())):
        documents.update({out / folder / f"{tag}.json": s for tag, s in schemas.items()})
    for path, document in documents.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(render(document))
    return sorted(documents)
