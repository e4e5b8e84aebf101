"""A process whose first key fetch falls in an outage (its connection attempt fails, or
hangs while the cluster elects its leaders) opens keys again once the outage is over:
the key store's connection is tried anew, never left failed or waiting for good."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agency.contracts.ids import new_id
from agency.infra.keystore import key_thread
from agency.infra.keystore.cipher import ThreadCipher
from agency.infra.keystore.operator import operator_keys
from agency.infra.keystore.vault import KeyVault

TIMEOUT = 0.5


def fault_first_open(monkeypatch: pytest.MonkeyPatch, seen: list[str], fault: str) -> None:
    opened = KeyVault.open

    async def open_with_fault(self: KeyVault) -> KeyVault:
        if not seen:
            seen.append(fault)
            if fault == "hangs":
                await asyncio.Event().wait()  # as a request no leader answers
            raise ConnectionError("the stream has no leader")
        seen.append("opened")
        return await opened(self)

    monkeypatch.setattr(KeyVault, "open", open_with_fault)


def key_once_up(cipher: ThreadCipher, tenant: str, within: float) -> Any:
    """The first data key the cipher makes for `tenant`, asked again until `within` s."""
    deadline = time.monotonic() + within
    failures: list[str] = []
    while True:
        try:
            return asyncio.run(cipher.prepare(tenant, "k1"))
        except (TimeoutError, ConnectionError) as e:
            failures.append(type(e).__name__)
            if time.monotonic() > deadline:
                raise AssertionError(f"no key within {within} s: {failures}") from e
            time.sleep(0.05)  # the poll's pace: a failed attempt is made again after a timeout


@pytest.mark.parametrize("fault", ["fails", "hangs"])
def test_a_key_store_connection_lost_to_an_outage_is_made_again(
    nats_url: str, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    first_open: list[str] = []  # how each `KeyVault.open` went
    fault_first_open(monkeypatch, first_open, fault)
    cipher = ThreadCipher(nats_url, operator_keys(), fetch_timeout=TIMEOUT)
    try:
        with pytest.raises((TimeoutError, ConnectionError)):
            asyncio.run(cipher.prepare("t" + new_id().lower(), "k0"))
        # Bounded: a hung attempt is given up after CONNECT_ROUNDS timeouts.
        key_once_up(cipher, "t" + new_id().lower(), within=key_thread.CONNECT_ROUNDS * 4 * TIMEOUT)
        assert first_open == [fault, "opened"]
    finally:
        cipher.close()
