"""Deleting a thread erases it: what it held is nowhere in the data directory afterwards,
and every read of it answers 410, while other threads stay as they were (docs/data.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agency.contracts.events import ThreadDeleted
from agency.contracts.ids import new_id
from agency.contracts.sealed import PayloadErased
from agency.infra.jetstream.connection import Bus
from agency.infra.keystore import current_cipher
from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client
from tests.helpers import assert_eventually


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


def done(state: dict[str, Any]) -> bool:
    return state["run"]["status"] in ("completed", "error", "canceled")


def found_in(directory: Path, markers: list[bytes]) -> list[tuple[str, str]]:
    """Every (file, marker) such that the file holds the marker."""
    found: list[tuple[str, str]] = []
    for path in directory.rglob("*"):
        if not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except (FileNotFoundError, PermissionError):
            continue  # a file gone while walking, or a socket
        found += [(str(path), m.decode()) for m in markers if m in data]
    return found


async def compact_postgres(database_url: str) -> None:
    """VACUUM FULL every database (a table rewritten, its old file unlinked), then the
    write-ahead log moved past the deletes and its old segments removed, not recycled."""
    admin = await asyncpg.connect(database_url)
    try:
        names = await admin.fetch("SELECT datname FROM pg_database WHERE NOT datistemplate")
        await admin.execute("ALTER SYSTEM SET wal_recycle = off")
        await admin.execute("SELECT pg_reload_conf()")
    finally:
        await admin.close()
    base = database_url.rsplit("/", 1)[0]
    for row in names:
        conn = await asyncpg.connect(f"{base}/{row['datname']}")
        try:
            await conn.execute("VACUUM FULL")
        finally:
            await conn.close()
    admin = await asyncpg.connect(database_url)
    try:
        for _ in range(3):
            await admin.execute("SELECT pg_switch_wal()")
            await admin.execute("CHECKPOINT")
    finally:
        await admin.close()


async def run_with_markers(client: Client, tag: str) -> tuple[str, list[bytes]]:
    said, word, text, answer = (f"{tag}-{kind}-{new_id()}" for kind in "swfa")
    client.llm.script(said, [
        ScriptStep(tool_calls=[call("lookup", word=word), call("write_file", path="n.md", content=text)]),
        ScriptStep(content=answer),
    ])  # fmt: skip
    thread = await client.thread()
    await client.invoke(thread, said)
    state = await client.until(thread, done)
    assert state["run"]["status"] == "completed", state["run"]
    assert state["state"]["files"] == {"n.md": text}
    return thread, [m.encode() for m in (said, word, text, answer)]


async def test_a_deleted_threads_markers_are_nowhere_in_the_data_directory(
    client: Client, session_dir: Path, database_url: str
) -> None:
    thread, markers = await run_with_markers(client, "gone")
    kept, kept_markers = await run_with_markers(client, "kept")

    r = await client.http.delete(f"/threads/{thread}")
    assert r.status_code == 200, r.text
    deletion = r.json()
    assert deletion["threadId"] == thread and deletion["requestedBy"].startswith("api-key:")
    again = await client.http.delete(f"/threads/{thread}")
    assert again.status_code == 200 and again.json()["deletedAt"] == deletion["deletedAt"]

    for path in ("", "/state", "/events", "/tree", "/stream", "/runs"):
        r = await client.http.get(client.path(thread) + path)
        assert r.status_code == 410, (path, r.text)
        assert r.json()["deletedAt"] == deletion["deletedAt"]
        assert r.json()["requestedBy"] == deletion["requestedBy"]
    r = await client.http.post(
        f"{client.path(thread)}/invoke", json={"messages": [{"role": "user", "content": "x"}]}
    )
    assert r.status_code == 410, r.text
    r = await client.http.post(f"{client.path(thread)}/fork", json={"atSeq": 2})
    assert r.status_code == 410, r.text

    await compact_postgres(database_url)
    assert found_in(session_dir, markers) == []

    # The other thread is as it was, its content still on disk and readable.
    state = await client.state(kept)
    assert state["state"]["files"] == {"n.md": kept_markers[2].decode()}
    r = await client.http.get(client.path(kept) + "/events", params={"type": "tool.output"})
    assert r.status_code == 200, r.text
    assert any(kept_markers[1].decode() in e["data"]["output"] for e in r.json()["events"])


async def test_a_deleted_threads_rows_leave_the_read_models(
    client: Client, database_url: str
) -> None:
    thread, _ = await run_with_markers(client, "rows")
    r = await client.http.delete(f"/threads/{thread}")
    assert r.status_code == 200 and r.json()["readModelsCaughtUp"] is True

    async def no_rows_left() -> None:
        leftover = await rows_of(database_url, thread)
        assert leftover == {}, leftover

    await assert_eventually(no_rows_left, timeout=20, interval=0.2)


async def rows_of(database_url: str, thread: str) -> dict[str, int]:
    """Rows naming the thread in any table of any database, but the projections' positions
    (ids and sequence numbers, no content: docs/data.md)."""
    admin = await asyncpg.connect(database_url)
    try:
        names = [r["datname"] for r in await admin.fetch(
            "SELECT datname FROM pg_database WHERE NOT datistemplate"
        )]  # fmt: skip
    finally:
        await admin.close()
    base, counts = database_url.rsplit("/", 1)[0], {}
    for name in names:
        conn = await asyncpg.connect(f"{base}/{name}")
        try:
            columns = await conn.fetch(
                "SELECT table_schema, table_name, column_name FROM information_schema.columns "
                "WHERE column_name IN ('thread_id', 'child_thread_id', 'aggregate_id') "
                "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
            )
            for c in columns:
                if c["table_name"].endswith("_positions"):
                    continue
                n = await conn.fetchval(
                    f'SELECT count(*) FROM "{c["table_schema"]}"."{c["table_name"]}" '
                    f'WHERE "{c["column_name"]}" = $1',
                    thread,
                )
                if n:
                    counts[f"{name}.{c['table_schema']}.{c['table_name']}"] = n
        finally:
            await conn.close()
    return counts


async def test_the_client_deletes_a_thread_and_then_reads_it_gone(client: Client) -> None:
    from agency.services.client import ApiError, AsyncAgencyClient

    thread, _ = await run_with_markers(client, "client")
    key = client.http.headers["Authorization"].removeprefix("Bearer ")
    async with AsyncAgencyClient(str(client.http.base_url), key) as api:
        deletion = await api.delete_thread(thread)
        assert deletion.thread_id == thread and thread in deletion.threads
        with pytest.raises(ApiError, match="was deleted at") as gone:
            await api.state(client.agency, thread)
        assert gone.value.status == 410


async def test_a_deletion_stopped_after_its_tombstone_is_finished_from_the_log(
    client: Client, bus: Bus, database_url: str
) -> None:
    thread, _ = await run_with_markers(client, "stopped")
    # What a deletion stopped right after its tombstone leaves: the key, the rows.
    position = await bus.store.last_position(client.tenant, "thread", thread)
    tombstone = ThreadDeleted(requested_by="admin", root_thread_id=thread, tree=(thread,))
    await bus.store.append(client.tenant, "thread", thread, [tombstone], expected=position)
    cipher = current_cipher()
    assert cipher is not None

    async def finished() -> None:
        assert await rows_of(database_url, thread) == {}
        with pytest.raises(PayloadErased):
            await cipher.vault_call(lambda v: v.data_key(client.tenant, thread, create=False))

    await assert_eventually(finished, timeout=20, interval=0.2)
    r = await client.http.get(client.path(thread) + "/state")
    assert r.status_code == 410 and r.json()["requestedBy"] == "admin"
