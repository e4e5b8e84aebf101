"""Sealed payloads: the content of a thread's events, encrypted under the thread's data key.

A thread's events carry what users and models wrote (messages, model text, tool arguments
and results, files, todos, variables). On the log those fields are one AES-GCM ciphertext
under a data key of the thread's tree (its root thread's key), so destroying that key
erases them from every copy of the log at once. The envelope (ids, type, sequence, time)
and the payload fields named in `CLEAR_FIELDS` (run outcomes, usage figures, step numbers)
stay in clear: counting, billing and ordering never need the key.

A sealed event is a `SealedEnvelope`: the clear fields in `payload`, the rest in `sealed`.
An event without `sealed` is read as it always was, so a log written before sealing (or by
a process with no cipher installed) stays readable.

The cipher is a port (`PayloadCipher`): the key store (`infra/keystore`) installs one per
process with `install_cipher`; `codec` seals and opens at that one boundary, so services,
projections, replay, fork and export see plaintext.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from agency.contracts.commands.base import CommandEnvelopeFields
from agency.contracts.envelope import EnvelopeFields
from agency.contracts.errors import ContractError

# Payload fields that stay in clear: figures and states, never free text or user data.
CLEAR_FIELDS: frozenset[str] = frozenset(
    {
        "type",
        "run_id",
        "step",
        "model",
        "usage",
        "finish_reason",
        "cost_usd",
        "agent_type",
        "max_steps",
        "message_count",
        "kind",
        "retryable",
        "end_user_id",
        "agency_id",
        "parent_thread_id",
        "root_thread_id",
    }
)

# The aggregates whose events are sealed: a thread's. Agencies, blueprints, tenants and
# workflows are the operator's configuration, not user data.
SEALED_AGGREGATES: frozenset[str] = frozenset({"thread"})
# Events of those aggregates never sealed: the deletion's tombstone outlives the key.
CLEAR_TYPES: frozenset[str] = frozenset({"thread.deleted"})


class SealedPart(msgspec.Struct, frozen=True, kw_only=True):
    """`key`: the data key's id (the root thread of the tree); `data`: nonce + ciphertext."""

    key: str
    data: bytes


class SealedEnvelope(EnvelopeFields, frozen=True, kw_only=True):
    """An event as stored sealed: clear payload fields, the others in `sealed`."""

    sealed: SealedPart
    payload: msgspec.Raw


class SealedCommandEnvelope(CommandEnvelopeFields, frozen=True, kw_only=True):
    """A command to a thread as stored sealed (`CommandEnvelope`'s fields, the payload's
    content under the thread's own data key, destroyed with its tree's)."""

    sealed: SealedPart
    payload: msgspec.Raw


class PayloadErased(ContractError):
    """The event's data key was destroyed: its content is gone for good."""

    tenant_id: str
    key_id: str
    message = "payload erased: the data key of thread {key_id!r} was destroyed"


class PayloadCipher(Protocol):
    """Seals and opens payload content with a thread tree's data key.

    `prepare` makes sure the key exists (a write may create it; `fresh`: the key is most
    likely new, the tree's root being created, so it is made without a look first); `seal`
    and `open` are
    synchronous (they run inside decoding) and may block briefly to fetch a key. `open`
    raises `PayloadErased` when the key was destroyed; `forget` drops a key held in memory
    once its tree's `thread.deleted` is read.
    """

    async def prepare(self, tenant_id: str, key_id: str, *, fresh: bool = False) -> None: ...

    def seal(self, tenant_id: str, key_id: str, plaintext: bytes, aad: bytes) -> bytes: ...

    def open(self, tenant_id: str, key_id: str, ciphertext: bytes, aad: bytes) -> bytes: ...

    def forget(self, tenant_id: str, key_id: str) -> None:
        """Drop the key from memory: its tree was deleted (by this process or another)."""


class _Installed:
    cipher: PayloadCipher | None = None


def install_cipher(cipher: PayloadCipher | None) -> None:
    """The process's cipher (None: events are written in clear)."""
    _Installed.cipher = cipher


def installed_cipher() -> PayloadCipher | None:
    return _Installed.cipher


def key_id_for(fields: EnvelopeFields) -> str | None:
    """The data key an event is sealed with, None when its aggregate is not sealed: the
    tree's root thread (`correlation_id`), or the thread itself at the root."""
    if fields.aggregate not in SEALED_AGGREGATES or fields.type in CLEAR_TYPES:
        return None
    return fields.correlation_id or fields.aggregate_id


def aad_of(fields: EnvelopeFields) -> bytes:
    """What the ciphertext is bound to: moving it to another event fails to open."""
    return f"{fields.tenant_id}|{fields.event_id}|{fields.type}".encode()


def split_fields(
    payload: dict[str, Any], also_clear: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The payload's clear fields and its sealed ones."""
    keep = CLEAR_FIELDS | also_clear if also_clear else CLEAR_FIELDS
    clear: dict[str, Any] = {}
    hidden: dict[str, Any] = {}
    for name, value in payload.items():
        (clear if name in keep else hidden)[name] = value
    return clear, hidden
