"""Size limits on what goes into one event, and the truncation that keeps content under them.

An event is one NATS message; the broker refuses anything over its max payload (1 MiB). Large
content (a model answer, a tool output, a file) is cut to a configurable limit with a visible
marker rather than failing the append. Every limit is in UTF-8 bytes, the unit the broker counts.

Environment variables (all optional, integers):

- `AGENCY_MAX_EVENT_BYTES`: one encoded event (default 1 MiB, the broker's max payload).
- `AGENCY_MAX_MESSAGE_BYTES`: the text of one model answer (default 256 KiB).
- `AGENCY_MAX_TOOL_OUTPUT_BYTES`: the output of one tool call (default 256 KiB).
- `AGENCY_MAX_FILE_BYTES`: the content of one file written by a tool (default 256 KiB).
- `AGENCY_MAX_EVENTS_PER_APPEND`: events in one atomic append (default 1000, the server's).
- `AGENCY_MAX_PATH_CHARS`: a file path (default 512 characters).
- `AGENCY_MAX_REQUEST_BYTES`: the messages and files of one invoke together (default
  512 KiB: the request is stored whole in one `request.accepted` event).

`limits()` reads them once per process.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

KIB = 1024
MIB = 1024 * KIB


class InvalidLimit(ValueError):
    def __init__(self, name: str, value: str) -> None:
        self.name = name
        self.value = value
        super().__init__(f"{name}={value!r}: expected a positive integer")


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    max_event_bytes: int = MIB
    max_message_bytes: int = 256 * KIB
    max_tool_output_bytes: int = 256 * KIB
    max_file_bytes: int = 256 * KIB
    max_events_per_append: int = 1000
    max_path_chars: int = 512
    max_request_bytes: int = 512 * KIB

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        return positive_ints(cls, "AGENCY_", environ)


@functools.cache
def limits() -> Limits:
    """This process's limits, read from the environment on first use."""
    return Limits.from_env()


T = TypeVar("T", bound=msgspec.Struct)


def positive_ints(cls: type[T], prefix: str, environ: Mapping[str, str] | None = None) -> T:
    """`cls`, a struct of positive whole numbers, each field from the variable `prefix` +
    its name in capitals when set (`InvalidLimit` naming it when not a positive number)."""
    env = os.environ if environ is None else environ
    default = cls()
    fields = cls.__struct_fields__
    return cls(**{f: positive_int(env, prefix + f.upper(), getattr(default, f)) for f in fields})


def positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    """The positive whole number the variable `name` holds, `default` when unset."""
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidLimit(name, raw) from None
    if value <= 0:
        raise InvalidLimit(name, raw)
    return value


def truncation_marker(omitted: int) -> str:
    return f"… [truncated: {omitted} bytes omitted]"


def truncate_text(text: str, limit: int) -> str:
    """`text` if its UTF-8 form fits in `limit` bytes, else its head plus a marker, within `limit`
    (for any limit longer than the marker itself).

    The cut falls on a character boundary; the marker says how many bytes were left out.
    """
    data = text.encode()
    if len(data) <= limit:
        return text
    # The marker's own length depends on the omitted count; a count with the most digits it
    # can have keeps the total within the limit.
    room = max(0, limit - len(truncation_marker(len(data)).encode()))
    head = data[:room].decode(errors="ignore")
    omitted = len(data) - len(head.encode())
    return head + truncation_marker(omitted)


def path_problem(path: str, limit: int) -> str | None:
    """Why `path` cannot name a file, or None: empty, a NUL character, or too long."""
    if not path.strip():
        return "a file path must not be empty"
    if "\x00" in path:
        return "a file path must not contain NUL (\\u0000)"
    if len(path) > limit:
        return f"a file path of {len(path)} characters exceeds the limit of {limit}"
    return None


def has_nul(value: Any) -> bool:
    """Whether a NUL (U+0000) is in `value`: text, keys and items of lists, dicts, structs."""
    match value:
        case str():
            return "\x00" in value
        case list() | tuple():
            return any(has_nul(v) for v in value)
        case dict():
            return any(has_nul(k) or has_nul(v) for k, v in value.items())
        case msgspec.Struct():
            return any(has_nul(getattr(value, f)) for f in value.__struct_fields__)
    return False


def is_truncated(text: str) -> bool:
    return text.endswith(" bytes omitted]") and "… [truncated: " in text
