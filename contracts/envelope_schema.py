"""The JSON Schema of an envelope narrowed to one message type, as the per-type JSON Schemas
(`contracts/schema.py`) and the AsyncAPI document (`contracts/asyncapi.py`) both describe
a message."""

from __future__ import annotations

import copy
import inspect
from typing import Any

JsonObject = dict[str, Any]


def narrowed(
    envelope: JsonObject, tag: str, version: int, payload: str, ref_template: str, kind: str
) -> JsonObject:
    """The envelope with `type`, `version` and `payload` fixed to one message type."""
    schema = copy.deepcopy(envelope)
    props = schema["properties"]
    props["type"] = {**props["type"], "const": tag}
    props["version"] = {**props["version"], "const": version}
    props["payload"] = {"$ref": ref_template.format(name=payload)}
    # msgspec leaves datetimes as a bare string; ours are always RFC 3339 with an offset.
    props["ts"] = {**props["ts"], "format": "date-time"}
    schema["title"] = tag
    schema["description"] = (
        f"A `{tag}` {kind} (schema version {version}): the envelope, whose `payload` is a "
        f"{payload}.\n\n{inspect.cleandoc(schema.get('description', ''))}"
    ).strip()
    return schema
