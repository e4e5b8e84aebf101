"""`agency keys rotate` on a data directory's operator key: a new key made, the old one kept
beside it until `--finish`, every tenant key rewrapped; refused while one is under way,
and without the previous key when the key comes from the environment."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.natsclient import connect
from agency.infra.keystore.operator import (
    OPERATOR_KEY_FILE,
    OPERATOR_KEY_VARIABLE,
    PREVIOUS_KEY_FILE,
    PREVIOUS_KEY_VARIABLE,
    KeyUnwrapError,
    LocalKeyWrapper,
)
from agency.infra.keystore.vault import KeyVault
from agency.infra.launch import NatsServer

REPO = Path(__file__).resolve().parents[2]


async def agency(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", *args,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    """A server of its own: the rotation rewraps every tenant key in its key store."""
    async with NatsServer(tmp_path / "nats") as started:
        yield started


async def tenant_key(server: NatsServer, secret: str, tenant: str) -> bytes:
    nc = await connect(server.url, connect_timeout=5)
    try:
        vault = await KeyVault(nc.jetstream(timeout=5), LocalKeyWrapper(secret)).open()
        return await vault.tenant_key(tenant)
    finally:
        await nc.close()


async def test_a_data_directorys_operator_key_is_rotated_kept_until_finish_then_dropped(
    server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(OPERATOR_KEY_VARIABLE)
    monkeypatch.delenv(PREVIOUS_KEY_VARIABLE, raising=False)
    data = tmp_path / "data"
    data.mkdir()
    write_endpoints(data, Endpoints(pid=os.getpid(), nats_url=server.url, database_url=""))
    (data / OPERATOR_KEY_FILE).write_text("first-key\n")
    keys = {t: await tenant_key(server, "first-key", t) for t in ("ta", "tb")}

    code, out, err = await agency("keys", "rotate", "--data-dir", str(data))
    assert code == 0, err
    new = (data / OPERATOR_KEY_FILE).read_text().strip()
    assert new != "first-key" and (data / PREVIOUS_KEY_FILE).read_text().strip() == "first-key"
    assert "2 tenant keys rewrapped" in out and "--finish" in out
    assert (data / OPERATOR_KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert {t: await tenant_key(server, new, t) for t in keys} == keys

    code, _, err = await agency("keys", "rotate", "--data-dir", str(data))
    assert code != 0 and "a rotation is under way" in err

    code, out, err = await agency("keys", "rotate", "--finish", "--data-dir", str(data))
    assert code == 0, err
    assert "0 tenant keys rewrapped, 2 already under it" in out
    assert not (data / PREVIOUS_KEY_FILE).exists()
    with pytest.raises(KeyUnwrapError):
        await tenant_key(server, "first-key", "ta")


async def test_a_rotation_of_a_key_from_the_environment_asks_for_the_previous_one(
    server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PREVIOUS_KEY_VARIABLE, raising=False)
    write_endpoints(tmp_path, Endpoints(pid=os.getpid(), nats_url=server.url, database_url=""))

    code, _, err = await agency("keys", "rotate", "--data-dir", str(tmp_path))

    assert code != 0 and f"{PREVIOUS_KEY_VARIABLE} is not set" in err
