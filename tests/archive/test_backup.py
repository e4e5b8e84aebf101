"""A backup (a snapshot of every stream) restored into a fresh data directory: the
services start there on an empty database and every thread is found again, its read
models rebuilt from the log."""

from __future__ import annotations

from pathlib import Path

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.archive.conftest import cli, deployment, endpoints_for, nats_in, until_state


def done(body: dict[str, object]) -> bool:
    run = body["run"]
    return isinstance(run, dict) and run["status"] == "completed"


async def test_a_backup_restored_into_a_fresh_data_directory_finds_every_thread(
    tmp_path: Path, database_url: str
) -> None:
    backup = tmp_path / "backup"
    key = "backup-run"
    async with (
        nats_in(tmp_path / "first" / "nats") as nats,
        deployment(nats, database_url) as first,
    ):
        first_dir = endpoints_for(tmp_path / "first", nats)
        _, api_key = await first.tenant("backed-up")
        first.llm.script(key, [
            ScriptStep(tool_calls=[ScriptToolCall(name="write_file", arguments={"path": "a.md", "content": "kept"})]),
            ScriptStep(content="saved"),
        ])  # fmt: skip
        async with first.client(api_key) as http:
            agency = (await http.post("/agencies", json={"name": "kept"})).json()["id"]
            threads = []
            for _ in range(3):
                r = await http.post(f"/agency/{agency}/agents", json={"agentType": "worker"})
                threads.append(r.json()["id"])
            for thread in threads:
                body = {"messages": [{"role": "user", "content": f"{key} {thread}"}]}
                r = await http.post(f"/agency/{agency}/agent/{thread}/invoke", json=body)
                assert r.status_code == 202, r.text
            for thread in threads:
                await until_state(http, f"/agency/{agency}/agent/{thread}", done)
        # Taken while the services run: a snapshot is one consistent moment of each stream.
        made = await cli("backup", "create", str(backup), "--data-dir", str(first_dir))
        assert made.status == 0, made.err
        assert "AGENCY_EVENTS:" in made.out

    refused = await cli("backup", "create", str(backup), "--data-dir", str(first_dir))
    assert refused.status == 2 and "exists" in refused.err

    async with nats_in(tmp_path / "second" / "nats") as nats:
        second_dir = endpoints_for(tmp_path / "second", nats)
        restored = await cli("backup", "restore", str(backup), "--data-dir", str(second_dir))
        assert restored.status == 0, restored.err
        again = await cli("backup", "restore", str(backup), "--data-dir", str(second_dir))
        assert again.status == 2 and "already holds" in again.err
        async with deployment(nats, database_url) as second, second.client(api_key) as http:
            for thread in threads:
                state = await until_state(http, f"/agency/{agency}/agent/{thread}", done)
                assert state["state"]["files"] == {"a.md": "kept"}
                assert state["state"]["messages"][-1]["content"] == "saved"
            r = await http.get(f"/agency/{agency}/threads")
            assert r.status_code == 200, r.text
            assert {t["id"] for t in r.json()["roots"]} == set(threads)
