"""A whole tenant moved by the operator's command line into a fresh deployment: its API
key works there and finds its agency and threads as they were."""

from __future__ import annotations

from pathlib import Path

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.archive.conftest import cli, deployment, endpoints_for, nats_in, until_state


async def test_a_tenant_moves_to_a_fresh_deployment_with_its_keys(
    tmp_path: Path, database_url: str
) -> None:
    archive = tmp_path / "tenant.tar.gz"
    key = "tenant-move"
    todos = ScriptToolCall(
        name="write_todos", arguments={"todos": [{"content": "move", "status": "completed"}]}
    )
    async with nats_in(tmp_path / "a" / "nats") as nats, deployment(nats, database_url) as first:
        data_a = endpoints_for(tmp_path / "a", nats)
        tenant, api_key = await first.tenant("moving")
        first.llm.script(key, [ScriptStep(tool_calls=[todos]), ScriptStep(content="moved")])
        async with first.client(api_key) as http:
            agency = (await http.post("/agencies", json={"name": "moving"})).json()["id"]
            thread = (
                await http.post(f"/agency/{agency}/agents", json={"agentType": "worker"})
            ).json()["id"]
            path = f"/agency/{agency}/agent/{thread}"
            body = {"messages": [{"role": "user", "content": key}]}
            assert (await http.post(f"{path}/invoke", json=body)).status_code == 202
            before = await until_state(http, path, lambda b: b["run"]["status"] == "completed")
        ran = await cli(
            "export", "tenant", tenant, "--out", str(archive), "--data-dir", str(data_a)
        )
        assert ran.status == 0, ran.err
        assert ran.out.startswith(f"exported tenant {tenant}: ")
        missing = await cli(
            "export", "thread", "nosuchthread", "--tenant", tenant, "--data-dir", str(data_a)
        )
        assert missing.status == 2 and "nosuchthread has no events" in missing.err

    async with nats_in(tmp_path / "b" / "nats") as nats, deployment(nats, database_url) as second:
        data_b = endpoints_for(tmp_path / "b", nats)
        ran = await cli("import", str(archive), "--data-dir", str(data_b))
        assert ran.status == 0, ran.err
        assert ran.out.startswith(f"imported tenant {tenant} into tenant {tenant}: ")
        again = await cli("import", str(archive), "--data-dir", str(data_b))
        assert again.status == 2 and f"tenant {tenant} already exists" in again.err
        async with second.client(api_key) as http:
            after = await until_state(
                http, path, lambda b: b["run"] is not None and b["run"]["status"] == "completed"
            )
            assert after["state"] == before["state"]
            assert after["state"]["todos"] == [{"content": "move", "status": "completed"}]
            r = await http.get("/keys")
            assert r.status_code == 200, r.text
