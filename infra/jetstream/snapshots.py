"""Stream snapshots: a backup of every stream of the account, and its restore.

JetStream's own snapshot API, as `nats stream backup` / `nats stream restore` use it: the
server packs a stream (its messages, configuration and durable consumers with their
positions) and sends it in chunks to a subject of ours, each acknowledged as flow
control, an empty message at the end; a restore sends the chunks back as requests, then an
empty one, and the server answers with the stream it created. Each stream is kept in a
directory of its own in the layout the `nats` CLI writes and reads (`backup.json`, the
configuration and state; `stream.tar.s2`, the data), so either tool restores the other's.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError

CHUNK_BYTES = 128 * 1024
META = "backup.json"
DATA = "stream.tar.s2"


class SnapshotError(Exception):
    """A snapshot or restore that failed; the message says where and why."""


@dataclass(frozen=True, slots=True)
class StreamCopy:
    stream: str
    messages: int
    bytes: int


async def stored_streams(nc: NATS, timeout: float = 5.0) -> list[str]:
    """The account's streams kept on disk, by name. Memory streams (the runtime's leases)
    hold nothing that outlives a restart and have no snapshot."""
    names: list[str] = []
    offset = 0
    while True:
        answer = await _api(nc, "$JS.API.STREAM.LIST", {"offset": offset}, timeout)
        page = answer.get("streams") or []
        names.extend(
            str(s["config"]["name"]) for s in page if s["config"].get("storage") != "memory"
        )
        offset += len(page)
        if not page or offset >= int(answer.get("total", 0)):
            return sorted(names)


async def snapshot_stream(
    nc: NATS, stream: str, directory: Path, *, timeout: float = 30.0
) -> StreamCopy:
    """Write `stream`'s snapshot, with its durable consumers, into `directory`."""
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=False)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, pending_msgs_limit=-1, pending_bytes_limit=-1)
    try:
        answer = await _api(
            nc,
            f"$JS.API.STREAM.SNAPSHOT.{stream}",
            {"deliver_subject": inbox, "no_consumers": False, "chunk_size": CHUNK_BYTES},
            timeout,
        )
        with (directory / DATA).open("wb") as out:
            while True:
                try:
                    msg = await sub.next_msg(timeout=timeout)
                except NatsTimeoutError:
                    raise SnapshotError(
                        f"snapshot of {stream}: no chunk within {timeout} s"
                    ) from None
                _check_status(msg, f"snapshot of {stream}")
                if not msg.data:
                    break
                out.write(msg.data)
                if msg.reply:
                    await nc.publish(msg.reply, b"")
    finally:
        await sub.unsubscribe()
    meta = {"config": answer.get("config", {}), "state": answer.get("state", {})}
    (directory / META).write_text(json.dumps(meta, indent=2))
    state = meta["state"]
    return StreamCopy(stream, int(state.get("messages", 0)), int(state.get("bytes", 0)))


async def restore_stream(nc: NATS, directory: Path, *, timeout: float = 30.0) -> StreamCopy:
    """Create the stream `directory` holds from its snapshot. A stream of that name that
    holds no message (one a fresh start provisioned) is replaced; one with messages is
    refused."""
    try:
        meta = json.loads((directory / META).read_text())
        data = (directory / DATA).open("rb")
    except (OSError, ValueError) as e:
        raise SnapshotError(f"{directory} is not a stream snapshot: {e}") from e
    stream = str(meta.get("config", {}).get("name", ""))
    if not stream:
        raise SnapshotError(f"{directory / META} names no stream")
    with data:
        await _clear(nc, stream, timeout)
        answer = await _api(nc, f"$JS.API.STREAM.RESTORE.{stream}", meta, timeout)
        deliver = str(answer["deliver_subject"])
        while chunk := data.read(CHUNK_BYTES):
            _check_answer(await nc.request(deliver, chunk, timeout=timeout), stream)
        # The server restores once it has everything: that may take a while.
        done = await nc.request(deliver, b"", timeout=max(timeout, 300.0))
    created = _check_answer(done, stream)
    state = created.get("state", {})
    return StreamCopy(stream, int(state.get("messages", 0)), int(state.get("bytes", 0)))


async def _clear(nc: NATS, stream: str, timeout: float) -> None:
    try:
        info = await _api(nc, f"$JS.API.STREAM.INFO.{stream}", {}, timeout)
    except SnapshotError as e:
        if "stream not found" in str(e):
            return
        raise
    held = int(info.get("state", {}).get("messages", 0))
    if held:
        raise SnapshotError(
            f"stream {stream} already holds {held} messages: restore into a fresh data "
            "directory (or a NATS whose streams are empty)"
        )
    await _api(nc, f"$JS.API.STREAM.DELETE.{stream}", {}, timeout)


async def _api(nc: NATS, subject: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    try:
        msg = await nc.request(subject, json.dumps(body).encode(), timeout=timeout)
    except NatsTimeoutError:
        raise SnapshotError(f"{subject}: no answer within {timeout} s") from None
    answer: dict[str, Any] = json.loads(msg.data or b"{}")
    error = answer.get("error")
    if error:
        raise SnapshotError(f"{subject}: {error.get('description', error)}")
    return answer


def _check_status(msg: Msg, what: str) -> None:
    status = (msg.headers or {}).get("Status")
    if status and status not in ("200", "100"):
        raise SnapshotError(f"{what}: {status} {(msg.headers or {}).get('Description', '')}")


def _check_answer(msg: Msg, stream: str) -> dict[str, Any]:
    if not msg.data:
        return {}
    try:
        answer: dict[str, Any] = json.loads(msg.data)
    except ValueError:
        return {}
    error = answer.get("error") if isinstance(answer, dict) else None
    if error:
        raise SnapshotError(f"restore of {stream}: {error.get('description', error)}")
    return answer
