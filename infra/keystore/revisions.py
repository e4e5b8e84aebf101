"""Erasing a key entry's replaced revisions where they are stored (docs/data.md).

The keys bucket keeps two revisions per entry and refuses a third
(`discard_new_per_subject`): a write never makes the server drop an older revision by its
limit, which would leave that revision's bytes in the stream's block files until they are
compacted. Instead each write is followed by the erase of the revision it replaced, with
JetStream's message delete, which overwrites the message where it is stored. A writer
stopped between the two leaves the replaced revision beside the current one: the next write
of that entry is refused until it is erased, and a rotation sweeps every entry of its scope.
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.errors import (
    APIError,
    BadRequestError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KeyValue

# JetStream's "sequence not found": the message was deleted already.
SEQUENCE_NOT_FOUND = 10043
# JetStream's "no message found": the subject holds no message at or after that sequence.
NO_MESSAGE_FOUND = 10037
# JetStream's "maximum messages per subject exceeded": a write refused while the entry
# still holds a replaced revision (`discard_new_per_subject`).
PER_SUBJECT_LIMIT = 10077
# Revisions the keys bucket keeps per entry: the current one, and the one it replaced until
# that is erased.
HISTORY = 2


def refused_for_history(error: APIError) -> bool:
    """The write was refused because the entry still holds a replaced revision."""
    return error.err_code == PER_SUBJECT_LIMIT


async def erase_revision(js: JetStreamContext, stream: str, revision: int) -> bool:
    """Overwrite the stored message of `revision` and remove it; False when it was gone
    already (erased by another writer of the same entry)."""
    # nats-py's delete sends no `no_erase`, which the server takes as false: the message is
    # overwritten in its block file, not only marked deleted.
    try:
        await js.delete_msg(stream, revision)
    except BadRequestError as e:
        if e.err_code != SEQUENCE_NOT_FOUND:
            raise
        return False
    return True


async def erase_before(js: JetStreamContext, stream: str, subject: str, revision: int) -> int:
    """Erase every revision of `subject` older than `revision` (every one when it is 0);
    how many were erased."""
    erased = 0
    start = 1
    while True:
        try:
            found = await js.get_msg(stream, seq=start, subject=subject, next=True)
        except NotFoundError as e:
            if e.err_code not in (NO_MESSAGE_FOUND, None):
                raise
            return erased
        seq = found.seq or 0
        if seq == 0 or (revision and seq >= revision):
            return erased
        erased += await erase_revision(js, stream, seq)
        start = seq + 1


class Revisions:
    """The writes of one key-value bucket that leave no replaced revision stored."""

    def __init__(self, js: JetStreamContext, kv: KeyValue, bucket: str) -> None:
        self._js = js
        self._kv = kv
        self.stream = f"KV_{bucket}"
        self._head = f"$KV.{bucket}."

    def subject(self, entry: str) -> str:
        return f"{self._head}{entry}"

    async def store(self, entry: str, value: bytes, last: int) -> int:
        """Store `value` as the entry's revision after `last` (0: the entry has none), then
        erase `last` where it is stored; `KeyWrongLastSequenceError` when another writer
        came first. A replaced revision a writer stopped midway left is erased first."""
        try:
            revision = await self._kv.update(entry, value, last=last)
        except KeyWrongLastSequenceError:
            raise
        except APIError as e:
            if not refused_for_history(e):
                raise
            await self.erase_before(entry, last)
            revision = await self._kv.update(entry, value, last=last)
        if last:
            await erase_revision(self._js, self.stream, last)
        return revision

    async def put_over(self, entry: str, value: bytes) -> int:
        """Store `value` whatever the entry holds (its older revisions are the caller's to
        erase), erasing them first when the bucket refuses another."""
        while True:
            try:
                return await self._kv.put(entry, value)
            except APIError as e:
                if not refused_for_history(e):
                    raise
                await self.erase_before(entry, 0)

    async def erase(self, revision: int) -> bool:
        """Erase one revision where it is stored; False when it was gone already."""
        return await erase_revision(self._js, self.stream, revision)

    async def erase_before(self, entry: str, revision: int) -> int:
        """Erase the entry's revisions older than `revision` (every one when it is 0)."""
        return await erase_before(self._js, self.stream, self.subject(entry), revision)

    async def held(self, prefix: str) -> dict[str, int]:
        """The entries starting with `prefix`, each with how many revisions it holds, as the
        server counts its subjects."""
        info = await self._js.stream_info(self.stream, subjects_filter=f"{self._head}{prefix}>")
        return {
            subject.removeprefix(self._head): count
            for subject, count in (info.state.subjects or {}).items()
        }

    async def sweep(self, prefix: str) -> int:
        """Erase the replaced revisions left beside the current one in the entries starting
        with `prefix` (by a write stopped before its erase); how many were erased."""
        erased = 0
        for entry, count in (await self.held(prefix)).items():
            if count < 2:
                continue
            try:
                found = await self._kv.get(entry)
            except (KeyDeletedError, KeyNotFoundError):
                continue
            if found.revision:
                erased += await self.erase_before(entry, found.revision)
        return erased
