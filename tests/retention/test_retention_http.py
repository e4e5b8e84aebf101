"""Retention over HTTP (docs/data.md, "Retention"; docs/operations.md): a tenant's within
the operator's maximum, an agency's within the tenant's, and the sweep deleting an
agency's idle threads but not one waiting for a person's approval."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agency.contracts.commands import SetTenantRetention
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.services.cli.main import build_parser
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.llm.fake_server import FakeLLMServer
from tests.deadletters import dead_letters_for
from tests.e2e.conftest import ADMIN, Client, running_system
from tests.helpers import assert_eventually, created_tenant

DAY = 86400.0
# An agency's threads in the sweep test are kept this long after their last activity.
SHORT = 3.0


# A system of its own (the operator's retention is read as each service starts), in a
# package of its own: no other package's system consumes its commands meanwhile.
@pytest.fixture(scope="module")
async def retention_api(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[tuple[str, FakeLLMServer]]:
    """The system with an operator's maximum of a day, swept every second."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AGENCY_RETENTION_MAX_DAYS", "1")
        env.setenv("AGENCY_RETENTION_SWEEP_SECONDS", "1")
        async with (
            FakeLLMServer(instant=True) as llm,
            running_system(nats_url, database_url, nats_server, llm) as url,
        ):
            yield url, llm


@pytest.fixture
async def client(retention_api: tuple[str, FakeLLMServer]) -> AsyncIterator[Client]:
    url, llm = retention_api
    async with httpx.AsyncClient(base_url=url, timeout=20) as admin:
        key, tenant, agency = await created_tenant(admin, ADMIN, "retention", "kept")
    assert agency is not None
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, timeout=20, headers=headers) as http:
        yield Client(http=http, llm=llm, agency=agency, tenant=tenant)


async def _put(client: Client, path: str, body: dict[str, Any]) -> httpx.Response:
    return await client.http.put(path, json=body)


async def test_a_tenant_sets_its_retention_within_the_operators_maximum(client: Client) -> None:
    r = await client.http.get("/retention")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "scope": "tenant",
        "id": client.tenant,
        "retentionSeconds": None,
        "effectiveSeconds": DAY,  # the maximum bounds the default (none) too
        "operatorDefaultSeconds": DAY,
        "operatorMaxSeconds": DAY,
    }
    r = await _put(client, "/retention", {"days": 2})
    assert r.status_code == 409 and "the operator's maximum, 1 day" in r.text, r.text
    r = await _put(client, "/retention", {"seconds": 0})
    assert r.status_code == 409 and "maximum" in r.text, r.text
    r = await _put(client, "/retention", {"days": 1, "seconds": 5})  # added up
    assert r.status_code == 409 and "the operator's maximum, 1 day" in r.text, r.text
    r = await _put(client, "/retention", {"seconds": -1})
    assert r.status_code == 400, r.text
    r = await _put(client, "/retention", {"days": 1e300})
    assert r.status_code == 400 and "days" in r.text, r.text
    r = await _put(client, "/retention", {"days": 0.5})
    assert r.status_code == 200, r.text
    assert r.json()["retentionSeconds"] == DAY / 2 and r.json()["effectiveSeconds"] == DAY / 2
    r = await _put(client, "/retention", {"days": 0.25, "seconds": 60})
    assert r.status_code == 200 and r.json()["retentionSeconds"] == DAY / 4 + 60, r.text

    async with httpx.AsyncClient(base_url=str(client.http.base_url), timeout=20) as admin:
        auth = {"Authorization": f"Bearer {ADMIN}"}
        r = await admin.get(f"/tenants/{client.tenant}/retention", headers=auth)
        assert r.status_code == 200 and r.json()["retentionSeconds"] == DAY / 4 + 60, r.text
        r = await admin.put(f"/tenants/{client.tenant}/retention", json={}, headers=auth)
        assert r.status_code == 200 and r.json()["retentionSeconds"] is None, r.text
        r = await admin.get("/tenants/no-such-tenant/retention", headers=auth)
        assert r.status_code == 404, r.text
    r = await client.http.get(f"/tenants/{client.tenant}/retention")
    assert r.status_code == 403, r.text


async def test_an_agency_sets_its_retention_within_the_tenants(client: Client) -> None:
    assert (await _put(client, "/retention", {"days": 0.5})).status_code == 200
    path = f"/agency/{client.agency}/retention"
    r = await _put(client, path, {"days": 1})
    assert r.status_code == 409 and "within the tenant's, 43200 seconds" in r.text, r.text
    r = await _put(client, path, {"seconds": 600})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "scope": "agency",
        "id": client.agency,
        "retentionSeconds": 600.0,
        "effectiveSeconds": 600.0,
        "operatorDefaultSeconds": DAY,
        "operatorMaxSeconds": DAY,
    }
    assert (await client.http.get(path)).json()["retentionSeconds"] == 600.0
    r = await client.http.get("/agency/no-such-agency/retention")
    assert r.status_code == 404, r.text


def done(state: dict[str, Any]) -> bool:
    return state["run"] is not None and state["run"]["status"] in ("completed", "error")


async def test_idle_threads_are_deleted_but_not_one_waiting_for_approval(client: Client) -> None:
    """The agency keeps threads 3 s: an idle one goes; one paused for approval stays past
    that, and goes once its run has ended and it has been idle as long."""
    key = "retention-hitl-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=(ScriptToolCall(name="lookup", arguments={"word": "w"}),)),
        ScriptStep(content="approved and done"),
    ])  # fmt: skip
    waiting = await client.thread("approver")
    await client.invoke(waiting, key)
    await client.until(waiting, lambda s: s["run"] is not None and s["run"]["status"] == "paused")
    idle = await client.thread()
    # Set once both are there: neither is deleted before the test has them as it wants.
    r = await _put(client, f"/agency/{client.agency}/retention", {"seconds": SHORT})
    assert r.status_code == 200, r.text

    async def gone(thread: str) -> None:
        r = await client.http.get(f"{client.path(thread)}/state")
        assert r.status_code == 410, r.text
        assert r.json()["requestedBy"] == "retention"

    await assert_eventually(lambda: gone(idle), timeout=30, interval=0.25)
    loop = asyncio.get_running_loop()
    past = loop.time() + SHORT + 2
    while loop.time() < past:  # well past its retention, still waiting: kept
        state = await client.state(waiting)
        assert state["run"]["status"] == "paused"
        await asyncio.sleep(0.5)
    r = await client.http.post(f"{client.path(waiting)}/approve", json={"approved": True})
    assert r.status_code == 202, r.text
    await assert_eventually(lambda: gone(waiting), timeout=30, interval=0.25)
    listed = [t["id"] for t in (await client.http.get(f"/agency/{client.agency}/agents")).json()]
    assert waiting not in listed and idle not in listed


async def test_the_operator_sets_and_reads_a_tenants_retention_with_the_cli(
    client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_endpoints(
        tmp_path,
        Endpoints(
            pid=os.getpid(), nats_url="nats://unused", database_url="postgresql://unused",
            api_url=str(client.http.base_url), admin_secret=ADMIN,
        ),
    )  # fmt: skip
    data_dir = ["--data-dir", str(tmp_path)]

    async def cli(*argv: str) -> int:
        args = build_parser().parse_args(["tenants", "retention", *argv, *data_dir])
        code: int = await args.handler(args)
        return code

    assert await cli(client.tenant, "--days", "0.25") == 0
    assert "threads kept 21600 s after their last activity (set: 21600 s;" in (
        capsys.readouterr().out
    )
    assert (await client.http.get("/retention")).json()["retentionSeconds"] == DAY / 4
    assert await cli(client.tenant) == 0
    assert "(set: 21600 s; operator default 1 day, maximum 1 day)" in capsys.readouterr().out
    assert await cli(client.tenant, "--default") == 0
    assert "threads kept 1 day after their last activity (the operator default;" in (
        capsys.readouterr().out
    )
    assert await cli(client.tenant, "--days", "3") == 1
    assert "409" in capsys.readouterr().err


async def test_a_retention_sent_over_nats_beyond_the_maximum_is_refused(
    client: Client, bus: Bus
) -> None:
    """However it arrives, the registry holds a retention to the operator's maximum."""
    await bus.commands.send(client.tenant, SetTenantRetention(seconds=2 * DAY))

    async def refused() -> None:
        letters = await dead_letters_for(bus, client.tenant)
        assert any(
            reason == "invalid_retention" and "the operator's maximum, 1 day" in detail
            for reason, detail, _ in letters
        ), letters

    await assert_eventually(refused, timeout=30, interval=0.25)
    assert (await client.http.get("/retention")).json()["retentionSeconds"] is None


async def test_a_subagent_tree_is_deleted_whole_once_idle(client: Client) -> None:
    key = "retention-tree-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=(
            ScriptToolCall(name="task", arguments={"description": f"one {key}-c", "subagentType": "worker"}),
            ScriptToolCall(name="task", arguments={"description": f"two {key}-c", "subagentType": "worker"}),
        )),
        ScriptStep(content="merged"),
    ])  # fmt: skip
    client.llm.script(f"{key}-c", [ScriptStep(content="child report")])
    root = await client.thread("manager")
    await client.invoke(root, key)
    state = await client.until(root, done)
    children = [link["childThreadId"] for link in state["state"]["subagents"]]
    assert state["run"]["status"] == "completed" and len(children) == 2
    r = await _put(client, f"/agency/{client.agency}/retention", {"seconds": SHORT})
    assert r.status_code == 200, r.text

    async def all_gone() -> None:
        for thread in (root, *children):
            r = await client.http.get(f"{client.path(thread)}/state")
            assert r.status_code == 410, (thread, r.text)
            assert r.json()["requestedBy"] == "retention"

    await assert_eventually(all_gone, timeout=30, interval=0.25)
