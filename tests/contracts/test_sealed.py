"""Sealed payloads: a thread's content is encrypted at the codec, its metadata stays clear."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agency.contracts.codec import decode_event, encode, encode_event
from agency.contracts.envelope import Envelope, utc_now
from agency.contracts.errors import DecodeError
from agency.contracts.events import (
    ChatMessage,
    MessageAppended,
    ModelCompleted,
    RunStarted,
    TodosWritten,
    Usage,
)
from agency.contracts.sealed import PayloadErased, install_cipher, installed_cipher
from agency.infra.jetstream.decoding import decode_recorded
from agency.infra.jetstream.records import UndecodableEvent

MARKER = "zebra-marker-" + secrets.token_hex(4)


class LocalCipher:
    """The cipher port over keys held in memory: what the key store does, without NATS."""

    def __init__(self) -> None:
        self.keys: dict[tuple[str, str], bytes] = {}

    async def prepare(self, tenant_id: str, key_id: str, *, fresh: bool = False) -> None:
        self.keys.setdefault((tenant_id, key_id), AESGCM.generate_key(bit_length=256))

    def seal(self, tenant_id: str, key_id: str, plaintext: bytes, aad: bytes) -> bytes:
        key = self.keys.setdefault((tenant_id, key_id), AESGCM.generate_key(bit_length=256))
        nonce = secrets.token_bytes(12)
        return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)

    def open(self, tenant_id: str, key_id: str, ciphertext: bytes, aad: bytes) -> bytes:
        key = self.keys.get((tenant_id, key_id))
        if key is None:
            raise PayloadErased(tenant_id, key_id)
        return AESGCM(key).decrypt(ciphertext[:12], ciphertext[12:], aad)

    def forget(self, tenant_id: str, key_id: str) -> None:
        """Its keys are its store: none is held apart from it."""


@pytest.fixture
def cipher() -> Iterator[LocalCipher]:
    previous = installed_cipher()
    local = LocalCipher()
    install_cipher(local)
    yield local
    install_cipher(previous)


def envelope(
    payload: Any, *, aggregate: str = "thread", correlation: str | None = None
) -> Envelope:
    return Envelope(
        event_id="e1",
        tenant_id="acme",
        aggregate=aggregate,  # type: ignore[arg-type]
        aggregate_id="th1",
        seq=1,
        ts=utc_now(),
        type=payload.__struct_config__.tag,
        version=1,
        correlation_id=correlation,
        payload=payload,
    )


def completed() -> ModelCompleted:
    return ModelCompleted(
        run_id="r1",
        step=2,
        model="m",
        message=ChatMessage(role="assistant", content=MARKER),
        usage=Usage(input_tokens=7, output_tokens=3),
        cost_usd=0.5,
    )


def test_a_threads_content_is_stored_sealed_and_reads_back(cipher: LocalCipher) -> None:
    original = envelope(completed())
    data = encode_event(original)
    assert MARKER.encode() not in data
    assert decode_event(data) == original


def test_metadata_and_figures_stay_in_clear(cipher: LocalCipher) -> None:
    stored = json.loads(encode_event(envelope(completed())))
    assert stored["type"] == "model.completed" and stored["event_id"] == "e1"
    assert stored["payload"]["usage"]["input_tokens"] == 7
    assert stored["payload"]["cost_usd"] == 0.5 and stored["payload"]["step"] == 2
    assert "message" not in stored["payload"]
    assert stored["sealed"]["key"] == "th1"


def test_a_subagent_is_sealed_with_its_root_threads_key(cipher: LocalCipher) -> None:
    stored = json.loads(encode_event(envelope(completed(), correlation="root1")))
    assert stored["sealed"]["key"] == "root1"


def test_events_of_other_aggregates_stay_in_clear(cipher: LocalCipher) -> None:
    data = encode_event(envelope(completed(), aggregate="workflow"))
    assert MARKER.encode() in data and b'"sealed"' not in data


def test_events_written_in_clear_still_read(cipher: LocalCipher) -> None:
    original = envelope(MessageAppended(message=ChatMessage(role="user", content=MARKER)))
    assert decode_event(encode(original)) == original


def test_a_clear_payload_holding_a_sealed_map_reads_as_written(cipher: LocalCipher) -> None:
    text = ',"sealed":{'
    original = envelope(MessageAppended(message=ChatMessage(role="user", content=text)))
    assert decode_event(encode(original)) == original


def test_a_destroyed_key_reads_as_erased_not_as_garbage(cipher: LocalCipher) -> None:
    data = encode_event(envelope(completed()))
    cipher.keys.clear()
    with pytest.raises(PayloadErased, match="th1"):
        decode_event(data)
    subject = "tenant.acme.evt.thread.th1.model_completed"
    recorded = decode_recorded(data, 1, subject)
    assert isinstance(recorded, UndecodableEvent) and "erased" in recorded.reason


def test_a_sealed_payload_moved_to_another_event_does_not_open(cipher: LocalCipher) -> None:
    stored = json.loads(encode_event(envelope(completed())))
    stored["event_id"] = "e2"
    with pytest.raises(InvalidTag):
        decode_event(json.dumps(stored, separators=(",", ":")).encode())


def test_without_a_cipher_a_sealed_event_is_refused_with_its_reason(cipher: LocalCipher) -> None:
    data = encode_event(envelope(completed()))
    install_cipher(None)
    with pytest.raises(DecodeError, match="no key store"):
        decode_event(data)


@pytest.mark.parametrize(
    "payload",
    [
        completed(),
        MessageAppended(message=ChatMessage(role="user", content=MARKER)),
        RunStarted(run_id="r1", agent_type="a", max_steps=3),  # nothing but clear fields
        TodosWritten(todos=()),
    ],
    ids=lambda p: p.__struct_config__.tag,
)
def test_a_sealed_event_reads_back_whatever_its_halves_hold(
    cipher: LocalCipher, payload: Any
) -> None:
    original = envelope(payload, correlation="root1")
    data = encode_event(original)
    assert b'"sealed":{' in data
    assert decode_event(data) == original
