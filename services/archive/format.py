"""The archive file: a tar.gz of `manifest.json`, `events.jsonl` and `files/`.

`events.jsonl` holds one event a line, each the envelope exactly as the log stored it
(snake_case: `event_id`, `tenant_id`, `aggregate`, `aggregate_id`, `seq`, `ts`, `type`,
`version`, the ids of its agency, thread and run, `causation_id`, `correlation_id`,
`idempotency_key`, `payload`), in the order the log recorded them. `files/<thread>/…` are
each thread's files as its events left them, for reading without Agency; the events are
what an import writes. The manifest counts the events of each aggregate and carries the
SHA-256 of every part, so a truncated or edited archive is refused.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import msgspec

from agency.contracts.codec import decode_event
from agency.contracts.envelope import Envelope
from agency.contracts.errors import ContractError
from agency.contracts.subjects import Aggregate
from agency.services.archive.errors import MalformedArchive, UnsupportedArchive

FORMAT = "agency-archive"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
# What an import reads at most, unpacked: a bound on a compressed archive that expands.
MAX_UNPACKED_BYTES = 512 * 1024 * 1024

Kind = Literal["thread", "agency", "tenant", "user"]


class AggregateEntry(msgspec.Struct, frozen=True, kw_only=True):
    aggregate: Aggregate
    id: str
    events: int


class FileEntry(msgspec.Struct, frozen=True, kw_only=True):
    thread_id: str
    path: str
    name: str
    bytes: int
    sha256: str


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    format: str
    version: int
    kind: Kind
    # The id exported: a thread's, an agency's, the tenant's or an end user's.
    root: str
    tenant_id: str
    exported_at: datetime
    agency_version: str
    events: int
    events_sha256: str
    aggregates: tuple[AggregateEntry, ...]
    files: tuple[FileEntry, ...] = ()


class _Head(msgspec.Struct, kw_only=True):
    format: object = None
    version: object = None


_manifest_encoder = msgspec.json.Encoder(order="deterministic")
_manifest_decoder = msgspec.json.Decoder(Manifest)
_head_decoder = msgspec.json.Decoder(_Head)
_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True, slots=True)
class Archive:
    manifest: Manifest
    events: tuple[Envelope, ...]
    # (thread id, path) → content.
    files: dict[tuple[str, str], str]


def file_name(thread_id: str, path: str, index: int, taken: set[str]) -> str:
    """Where a thread's file goes in the archive: its path when that is a plain relative
    one not taken yet (`/a.md` and `a.md` are two files), else its position among the
    thread's files. The name is added to `taken`."""
    parts = path.strip("/").split("/")
    name = f"files/{thread_id}/{'/'.join(parts)}"
    if not all(_SAFE.match(p) and p not in (".", "..") for p in parts) or name in taken:
        name = f"files/{thread_id}/_{index}"
        while name in taken:
            name += "_"
    taken.add(name)
    return name


def pack(manifest: Manifest, lines: Sequence[bytes], files: dict[str, bytes]) -> bytes:
    """The archive's bytes; `lines` are the stored envelopes, `files` by member name."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        _add(tar, MANIFEST, _manifest_encoder.encode(manifest))
        _add(tar, EVENTS, b"".join(line + b"\n" for line in lines))
        for name, content in files.items():
            _add(tar, name, content)
    return out.getvalue()


def events_digest(lines: Sequence[bytes]) -> str:
    return hashlib.sha256(b"".join(line + b"\n" for line in lines)).hexdigest()


def unpack(data: bytes) -> Archive:
    """The archive in `data`, checked part by part; `MalformedArchive` or
    `UnsupportedArchive` say what is wrong."""
    members = _members(data)
    raw_manifest = members.get(MANIFEST)
    if raw_manifest is None:
        raise MalformedArchive(f"no {MANIFEST}")
    manifest = _manifest(raw_manifest)
    body = members.get(EVENTS)
    if body is None:
        raise MalformedArchive(f"no {EVENTS}")
    if hashlib.sha256(body).hexdigest() != manifest.events_sha256:
        raise MalformedArchive(f"{EVENTS} does not match the manifest's SHA-256")
    events = tuple(_event(n, line) for n, line in enumerate(body.splitlines(), 1) if line)
    if len(events) != manifest.events:
        raise MalformedArchive(f"{len(events)} events where the manifest counts {manifest.events}")
    files: dict[tuple[str, str], str] = {}
    for entry in manifest.files:
        content = members.get(entry.name)
        if content is None or hashlib.sha256(content).hexdigest() != entry.sha256:
            raise MalformedArchive(f"file {entry.name} is missing or does not match the manifest")
        files[(entry.thread_id, entry.path)] = content.decode()
    return Archive(manifest=manifest, events=events, files=files)


def _add(tar: tarfile.TarFile, name: str, content: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(content))


def _members(data: bytes) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for info in tar:
                if not info.isfile():
                    raise MalformedArchive(f"member {info.name!r} is not a regular file")
                total += info.size
                if total > MAX_UNPACKED_BYTES:
                    raise MalformedArchive(
                        f"more than {MAX_UNPACKED_BYTES} bytes unpacked; split the export"
                    )
                extracted = tar.extractfile(info)
                assert extracted is not None  # a regular file always has content
                members[info.name] = extracted.read()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise MalformedArchive(f"not a tar.gz file ({e})") from e
    return members


def _manifest(raw: bytes) -> Manifest:
    try:
        head = _head_decoder.decode(raw)
    except msgspec.DecodeError as e:
        raise MalformedArchive(f"{MANIFEST} is not a JSON object ({e})") from e
    if head.format != FORMAT:
        raise MalformedArchive(f"{MANIFEST} names format {head.format!r}, not {FORMAT!r}")
    if head.version != FORMAT_VERSION:
        raise UnsupportedArchive(head.version, FORMAT_VERSION)
    try:
        return _manifest_decoder.decode(raw)
    except msgspec.DecodeError as e:
        raise MalformedArchive(f"{MANIFEST}: {e}") from e


def _event(number: int, line: bytes) -> Envelope:
    try:
        return decode_event(line)
    except (ContractError, msgspec.DecodeError) as e:
        raise MalformedArchive(f"{EVENTS} line {number}: {e}") from e
