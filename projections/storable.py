"""Making events storable in PostgreSQL, whatever text they carry.

PostgreSQL `text` and `jsonb` cannot hold NUL (U+0000), which JSON and the log can. An event
carrying one is projected with each NUL replaced by U+FFFD (the replacement character), in
its decoded fields and in the raw JSON alike (a sealed event's raw JSON holds none: they are
in its ciphertext); the log keeps the original. A path too long
for a btree key (about 2,700 bytes) is stored as its head and a hash of the whole, so one
long path can never stop a projection.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

from agency.contracts.codec import decode_event, encode, is_sealed
from agency.infra.jetstream.records import RecordedEvent

# A `\u0000` escape, not an escaped backslash followed by the text "u0000".
_NUL_ESCAPE = re.compile(rb"(?<!\\)((?:\\\\)*)\\u0000")
MAX_KEY_CHARS = 512


def storable(event: RecordedEvent) -> RecordedEvent:
    """`event`, or a copy of it without NUL characters when it has any. A sealed event's
    NULs are in its ciphertext: its stored bytes are kept, its decoded fields cleaned."""
    if is_sealed(event.raw):
        # Its clear fields are in both; the sealed ones only in the decoded envelope.
        clear = encode(event.envelope)
        if b"\\u0000" not in clear:
            return event
        cleaned = _NUL_ESCAPE.sub(rb"\1\\ufffd", clear)
        raw = _NUL_ESCAPE.sub(rb"\1\\ufffd", event.raw)
        return dataclasses.replace(event, envelope=decode_event(cleaned), raw=raw)
    if b"\\u0000" not in event.raw:
        return event
    raw = _NUL_ESCAPE.sub(rb"\1\\ufffd", event.raw)
    if raw == event.raw:
        return event
    return dataclasses.replace(event, envelope=decode_event(raw), raw=raw)


def storable_key(value: str) -> str:
    """`value` if it fits a key column; else its head and the sha256 of the whole."""
    if len(value) <= MAX_KEY_CHARS:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()
    return f"{value[: MAX_KEY_CHARS - 80]}…#sha256:{digest}"
