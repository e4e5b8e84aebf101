"""What an import refuses, and an agency copied into another tenant of the same deployment."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from agency.services.client import ApiError, AsyncAgencyClient
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.archive.conftest import (
    Deployment,
    cli,
    deployment,
    endpoints_for,
    nats_in,
    until_state,
)

GZIP = {"Content-Type": "application/gzip"}


@dataclass
class Tenant:
    id: str
    http: httpx.AsyncClient
    agency: str


@pytest.fixture(scope="module")
async def system(
    tmp_path_factory: pytest.TempPathFactory, database_url: str
) -> AsyncIterator[Deployment]:
    directory: Path = tmp_path_factory.mktemp("rules")
    async with nats_in(directory / "nats") as nats, deployment(nats, database_url) as running:
        yield running


@pytest.fixture
async def tenant(system: Deployment) -> AsyncIterator[Tenant]:
    tenant_id, key = await system.tenant("rules")
    async with system.client(key) as http:
        r = await http.post("/agencies", json={"name": "rules"})
        yield Tenant(id=tenant_id, http=http, agency=r.json()["id"])


async def finished_thread(system: Deployment, tenant: Tenant, text: str) -> str:
    system.llm.script(text, [ScriptStep(content=f"answer to {text}")])
    r = await tenant.http.post(f"/agency/{tenant.agency}/agents", json={"agentType": "worker"})
    thread = str(r.json()["id"])
    path = f"/agency/{tenant.agency}/agent/{thread}"
    r = await tenant.http.post(
        f"{path}/invoke", json={"messages": [{"role": "user", "content": text}]}
    )
    assert r.status_code == 202, r.text
    await until_state(tenant.http, path, lambda b: b["run"]["status"] == "completed")
    return thread


def members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def packed(parts: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, content in parts.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


async def test_a_body_that_is_no_archive_is_refused_with_400(tenant: Tenant) -> None:
    r = await tenant.http.post("/import", content=b"not an archive", headers=GZIP)
    assert r.status_code == 400, r.text
    assert "malformed archive: not a tar.gz file" in r.json()["error"]


async def test_an_archive_of_another_version_is_refused_naming_it(
    system: Deployment, tenant: Tenant
) -> None:
    thread = await finished_thread(system, tenant, "rules-version")
    parts = members(
        (await tenant.http.get(f"/agency/{tenant.agency}/agent/{thread}/export")).content
    )
    manifest = json.loads(parts["manifest.json"])
    parts["manifest.json"] = json.dumps({**manifest, "version": 2}).encode()
    r = await tenant.http.post("/import", content=packed(parts), headers=GZIP)
    assert r.status_code == 400, r.text
    assert "archive format version 2 is not supported" in r.json()["error"]


async def test_an_edited_archive_is_refused_and_nothing_is_written(
    system: Deployment, tenant: Tenant
) -> None:
    thread = await finished_thread(system, tenant, "rules-edited")
    parts = members(
        (await tenant.http.get(f"/agency/{tenant.agency}/agent/{thread}/export")).content
    )
    parts["events.jsonl"] = parts["events.jsonl"].replace(b"answer to", b"ANSWER TO")
    _, other_key = await system.tenant("rules-target")
    async with system.client(other_key) as other:
        r = await other.post("/import", content=packed(parts), headers=GZIP)
        assert r.status_code == 400, r.text
        assert "events.jsonl does not match the manifest's SHA-256" in r.json()["error"]
        r = await other.get(f"/agency/{tenant.agency}/agent/{thread}/state")
        assert r.status_code == 404, r.text


async def test_a_thread_at_work_is_not_exported(system: Deployment, tenant: Tenant) -> None:
    text = "rules-busy"
    call = ScriptToolCall(name="lookup_guarded", arguments={"word": "x"})
    system.llm.script(text, [ScriptStep(tool_calls=[call])])
    r = await tenant.http.post(f"/agency/{tenant.agency}/agents", json={"agentType": "worker"})
    path = f"/agency/{tenant.agency}/agent/{r.json()['id']}"
    await tenant.http.post(f"{path}/invoke", json={"messages": [{"role": "user", "content": text}]})
    await until_state(tenant.http, path, lambda b: b["run"]["status"] == "paused")
    r = await tenant.http.get(f"{path}/export")
    assert r.status_code == 409, r.text
    assert "is not idle (run run_" in r.json()["error"] and "is active" in r.json()["error"]
    r = await tenant.http.get(f"/agency/{tenant.agency}/export")
    assert r.status_code == 409, r.text


async def test_a_tenant_archive_is_imported_by_the_operator_only(
    system: Deployment, tenant: Tenant
) -> None:
    await finished_thread(system, tenant, "rules-tenant")
    exported = await tenant.http.get("/export")
    assert exported.status_code == 200, exported.text
    r = await tenant.http.post("/import", content=exported.content, headers=GZIP)
    assert r.status_code == 403, r.text
    assert "operator" in r.json()["error"]
    r = await system.admin.post("/tenants/import", content=exported.content, headers=GZIP)
    assert r.status_code == 409, r.text
    assert f"tenant {tenant.id} already exists" in r.json()["error"]
    # The operator reads the same archive of any tenant.
    r = await system.admin.get(f"/tenants/{tenant.id}/export")
    assert r.status_code == 200, r.text
    assert json.loads(members(r.content)["manifest.json"])["kind"] == "tenant"


async def test_an_agency_is_copied_into_another_tenant(system: Deployment, tenant: Tenant) -> None:
    threads = {await finished_thread(system, tenant, f"rules-agency-{n}") for n in range(2)}
    r = await tenant.http.get(f"/agency/{tenant.agency}/export")
    assert r.status_code == 200, r.text
    other_id, other_key = await system.tenant("rules-copy")
    async with system.client(other_key) as other:
        done = await other.post("/import", content=r.content, headers=GZIP)
        assert done.status_code == 201, done.text
        assert done.json()["kind"] == "agency" and done.json()["id"] == tenant.agency
        assert set(done.json()["threads"]) == threads
        for thread in threads:
            state = await until_state(
                other,
                f"/agency/{tenant.agency}/agent/{thread}",
                lambda b: b["run"] is not None and b["run"]["status"] == "completed",
            )
            assert state["state"]["messages"][-1]["content"].startswith("answer to rules-agency-")
        again = await other.post("/import", content=r.content, headers=GZIP)
        assert again.status_code == 409, again.text
        assert (
            f"agency {tenant.agency} already exists in tenant {other_id}" in again.json()["error"]
        )


async def test_an_end_users_threads_are_exported_and_copied_into_another_tenant(
    system: Deployment, tenant: Tenant, tmp_path: Path
) -> None:
    user = "ana.lima@example.com"
    mine = []
    for text in ("rules-user-1", "rules-user-2"):
        system.llm.script(text, [ScriptStep(content=f"answer to {text}")])
        body = {"agentType": "worker", "endUserId": user}
        r = await tenant.http.post(f"/agency/{tenant.agency}/agents", json=body)
        assert r.status_code == 201, r.text
        mine.append(r.json()["id"])
    r = await tenant.http.post(
        "/langgraph/threads",
        json={"metadata": {"graph_id": "worker", "user_id": user}},
        headers={"x-agency-id": tenant.agency},
    )
    assert r.status_code == 200, r.text
    mine.append(r.json()["thread_id"])
    someone_else = await finished_thread(system, tenant, "rules-user-other")

    r = await tenant.http.get("/export", params={"endUserId": user})
    assert r.status_code == 200, r.text
    manifest = json.loads(members(r.content)["manifest.json"])
    assert manifest["kind"] == "user" and manifest["root"] == user
    threads = {a["id"] for a in manifest["aggregates"] if a["aggregate"] == "thread"}
    assert threads == set(mine) and someone_else not in threads

    data = endpoints_for(tmp_path / "data", system.nats)
    out = tmp_path / "user.tar.gz"
    ran = await cli("users", "export", user, "--tenant", tenant.id, "-o", str(out),
                    "--data-dir", str(data))  # fmt: skip
    assert ran.status == 0, ran.err
    assert ran.out.startswith(f"exported user {user}: ")
    _, other_key = await system.tenant("rules-user-copy")
    async with system.client(other_key) as other:
        done = await other.post("/import", content=out.read_bytes(), headers=GZIP)
        assert done.status_code == 201, done.text
        assert set(done.json()["threads"]) == set(mine)
        assert done.json()["kept"] == []
        r = await other.get("/export", params={"endUserId": user})
        assert r.status_code == 200, r.text

    r = await tenant.http.get("/export", params={"endUserId": "nobody"})
    assert r.status_code == 404, r.text
    r = await tenant.http.get("/export", params={"endUserId": "no spaces"})
    assert r.status_code == 400, r.text
    body = {"agentType": "worker", "endUserId": "no spaces"}
    r = await tenant.http.post(f"/agency/{tenant.agency}/agents", json=body)
    assert r.status_code == 400, r.text
    assert "endUserId" in r.json()["error"]


async def test_an_import_made_in_part_is_finished_by_the_next(
    system: Deployment, tenant: Tenant
) -> None:
    """What the target holds of the archive itself (an interrupted import's, or a thread of
    the agency imported before) is kept, and the rest is written."""
    first, second = [await finished_thread(system, tenant, f"rules-part-{n}") for n in range(2)]
    one = await tenant.http.get(f"/agency/{tenant.agency}/agent/{first}/export")
    whole = await tenant.http.get(f"/agency/{tenant.agency}/export")
    _, other_key = await system.tenant("rules-part-copy")
    async with system.client(other_key) as other:
        r = await other.post("/import", content=one.content, headers=GZIP)
        assert r.status_code == 201, r.text
        r = await other.post("/import", content=whole.content, headers=GZIP)
        assert r.status_code == 201, r.text
        assert r.json()["threads"] == [second]
        await until_state(
            other,
            f"/agency/{tenant.agency}/agent/{second}",
            lambda b: b["run"] is not None and b["run"]["status"] == "completed",
        )


async def test_only_a_tenants_archive_holds_the_tenants_own_events(
    system: Deployment, tenant: Tenant
) -> None:
    parts = members((await tenant.http.get("/export")).content)
    manifest = json.loads(parts["manifest.json"])
    parts["manifest.json"] = json.dumps({**manifest, "kind": "agency"}).encode()
    _, other_key = await system.tenant("rules-forged")
    async with system.client(other_key) as other:
        r = await other.post("/import", content=packed(parts), headers=GZIP)
        assert r.status_code == 400, r.text
        assert f"holds tenant {tenant.id}: only a tenant's archive" in r.json()["error"]


async def test_a_blueprint_no_tenant_may_save_is_refused_in_an_archive(
    system: Deployment, tenant: Tenant
) -> None:
    r = await tenant.http.post(
        f"/agency/{tenant.agency}/blueprints", json={"name": "bp-shell", "prompt": "You help."}
    )
    assert r.status_code in (201, 202), r.text
    parts = members((await tenant.http.get(f"/agency/{tenant.agency}/export")).content)
    lines = []
    for line in parts["events.jsonl"].splitlines():
        event = json.loads(line)
        if event["type"] == "blueprint.saved":
            config = event["payload"]["blueprint"].setdefault("config", {})
            config["mcp_servers"] = [{"name": "sh", "command": ["/bin/sh", "-c", "id"]}]
        lines.append(json.dumps(event).encode())
    parts["events.jsonl"] = b"".join(line + b"\n" for line in lines)
    manifest = json.loads(parts["manifest.json"])
    manifest["events_sha256"] = hashlib.sha256(parts["events.jsonl"]).hexdigest()
    parts["manifest.json"] = json.dumps(manifest).encode()
    _, other_key = await system.tenant("rules-shell")
    async with system.client(other_key) as other:
        r = await other.post("/import", content=packed(parts), headers=GZIP)
        assert r.status_code == 400, r.text
        assert "stdio servers (`command`) are the operator's" in r.json()["error"]
        r = await other.get(f"/agency/{tenant.agency}/blueprints")
        assert r.status_code == 404, r.text


async def test_a_threads_archive_goes_into_its_agency_as_the_target_has_it(
    system: Deployment, tenant: Tenant
) -> None:
    first, second = [await finished_thread(system, tenant, f"rules-kept-{n}") for n in range(2)]
    one = await tenant.http.get(f"/agency/{tenant.agency}/agent/{first}/export")
    two = await tenant.http.get(f"/agency/{tenant.agency}/agent/{second}/export")
    _, other_key = await system.tenant("rules-kept-copy")
    async with system.client(other_key) as other:
        assert (await other.post("/import", content=one.content, headers=GZIP)).status_code == 201
        # The agency moves on in the target: it is no longer the archive's.
        r = await other.post(
            f"/agency/{tenant.agency}/blueprints", json={"name": "bp-new", "prompt": "New."}
        )
        assert r.status_code in (201, 202), r.text
        r = await other.post("/import", content=two.content, headers=GZIP)
        assert r.status_code == 201, r.text
        assert r.json()["kept"] == [f"agency {tenant.agency}"]
        assert r.json()["threads"] == [second]
        r = await other.get(f"/agency/{tenant.agency}/blueprints/bp-new")
        assert r.status_code == 200, r.text


async def test_the_python_client_exports_and_imports(system: Deployment, tenant: Tenant) -> None:
    thread = await finished_thread(system, tenant, "rules-client")
    key = tenant.http.headers["Authorization"].removeprefix("Bearer ")
    async with AsyncAgencyClient(system.url, key) as client:
        archive = await client.export_thread(tenant.agency, thread)
        assert json.loads(members(archive)["manifest.json"])["root"] == thread
        assert members(await client.export_agency(tenant.agency))
        assert members(await client.export_tenant())
        with pytest.raises(ApiError) as refused:
            await client.export_tenant(end_user_id="nobody")
        assert refused.value.status == 404
    _, other_key = await system.tenant("rules-client-copy")
    async with AsyncAgencyClient(system.url, other_key) as other:
        done = await other.import_archive(archive)
        assert done.kind == "thread" and done.id == thread and done.threads == [thread]
        with pytest.raises(ApiError) as again:
            await other.import_archive(archive)
        assert again.value.status == 409
