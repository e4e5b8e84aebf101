"""Forgetting an end user deletes every thread created for them across the tenant's
agencies, recorded (who asked, when), finished from the log when stopped half-way
(docs/data.md)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agency.contracts.events import (
    AgencyDeleted,
    AgencyDeletionRequested,
    EndUserForgetRequested,
    EndUserForgotten,
)
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.services.cli import agencies_cmd, archive_cmd, tenants_cmd
from agency.services.threads import scope_erasure
from agency.services.threads.reads import Creation
from tests.e2e.conftest import ADMIN, Client
from tests.helpers import assert_eventually


async def user_thread(client: Client, agency: str, end_user: str) -> str:
    r = await client.http.post(
        f"/agency/{agency}/agents", json={"agentType": "worker", "endUserId": end_user}
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def second_agency(client: Client) -> str:
    r = await client.http.post("/agencies", json={"name": "second"})
    assert r.status_code in (201, 202), r.text
    agency = str(r.json()["id"])

    async def listed() -> None:
        assert agency in {a["id"] for a in (await client.http.get("/agencies")).json()}

    await assert_eventually(listed, timeout=30, interval=0.1)
    return agency


async def status_of(client: Client, agency: str, thread: str) -> int:
    return (await client.http.get(f"/agency/{agency}/agent/{thread}/state")).status_code


async def test_forget_deletes_the_users_threads_in_every_agency_and_no_other(
    client: Client,
) -> None:
    other_agency = await second_agency(client)
    ann = [
        (client.agency, await user_thread(client, client.agency, "ann@example.com")),
        (other_agency, await user_thread(client, other_agency, "ann@example.com")),
    ]
    bob = await user_thread(client, client.agency, "bob")
    r = await client.http.post("/users/ann@example.com/forget")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["endUserId"] == "ann@example.com"
    assert sorted(body["threads"]) == sorted(t for _, t in ann)
    assert body["requestedBy"].startswith("api-key:") and body["requestedAt"]
    for agency, thread in ann:
        assert await status_of(client, agency, thread) == 410
    assert await status_of(client, client.agency, bob) == 200
    again = await client.http.post("/users/ann@example.com/forget")
    assert again.status_code == 200 and again.json()["threads"] == []
    assert again.json()["requestId"] != body["requestId"]  # each request is recorded
    bad = await client.http.post("/users/not%20a%20user/forget")
    assert bad.status_code == 400 and "end user id" in bad.text


async def test_a_forget_request_recorded_but_not_carried_out_is_finished_from_the_log(
    client: Client, bus: Bus
) -> None:
    """What a process killed right after recording the request leaves: the consumer of
    the log deletes the threads and records the request done."""
    thread = await user_thread(client, client.agency, "carol")
    position = await bus.store.last_position(client.tenant, "tenant", client.tenant)
    request = EndUserForgetRequested(end_user_id="carol", requested_by="admin")
    done = await bus.store.append(
        client.tenant, "tenant", client.tenant, [request], expected=position
    )
    request_id = done.events[0].envelope.event_id

    async def finished() -> None:
        assert await status_of(client, client.agency, thread) == 410
        recorded = [
            e.payload
            for e in await bus.store.read(client.tenant, "tenant", client.tenant)
            if isinstance(e.payload, EndUserForgotten) and e.payload.request_id == request_id
        ]
        assert [f.threads for f in recorded] == [(thread,)]

    await assert_eventually(finished, timeout=30, interval=0.2)


async def cli_json(
    client: Client, tmp_path: Path, register: Callable[[Any], None], argv: list[str]
) -> Any:
    """`agency ARGV --json` against the test's API as the client's tenant: its answer."""
    key = client.http.headers["Authorization"].removeprefix("Bearer ")
    endpoints = Endpoints(
        pid=os.getpid(), nats_url="nats://unused", database_url="postgresql://unused",
        api_url=str(client.http.base_url), api_key=key, tenant_id=client.tenant,
    )  # fmt: skip
    write_endpoints(tmp_path, endpoints)
    parser = argparse.ArgumentParser(prog="agency")
    register(parser.add_subparsers(dest="group", required=True))
    args = parser.parse_args([*argv, "--json", "--data-dir", str(tmp_path)])
    out, err = io.StringIO(), io.StringIO()
    with capture_logs(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = await args.handler(args)
    assert status == 0, err.getvalue()
    return json.loads(out.getvalue())


async def test_the_cli_forgets_an_end_user(client: Client, tmp_path: Path) -> None:
    thread = await user_thread(client, client.agency, "dave")
    answer = await cli_json(client, tmp_path, archive_cmd.register, ["users", "forget", "dave"])
    assert answer["threads"] == [thread] and answer["endUserId"] == "dave"
    assert await status_of(client, client.agency, thread) == 410


async def test_the_cli_deletes_an_agency(client: Client, tmp_path: Path) -> None:
    doomed = await second_agency(client)
    thread = await user_thread(client, doomed, "hal")
    answer = await cli_json(client, tmp_path, agencies_cmd.register, ["agencies", "delete", doomed])
    assert answer["agencyId"] == doomed and answer["threads"] == [thread]
    listed = {a["id"] for a in (await client.http.get("/agencies")).json()}
    assert doomed not in listed


async def test_deleting_an_agency_deletes_its_threads_then_the_agency(client: Client) -> None:
    doomed = await second_agency(client)
    threads = [await user_thread(client, doomed, "erin") for _ in range(2)]
    kept = await user_thread(client, client.agency, "erin")
    r = await client.http.delete(f"/agencies/{doomed}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["agencyId"] == doomed and sorted(body["threads"]) == sorted(threads)
    assert body["requestedBy"].startswith("api-key:")
    for thread in threads:
        assert await status_of(client, doomed, thread) in (404, 410)
    assert await status_of(client, client.agency, kept) == 200
    listed = {a["id"] for a in (await client.http.get("/agencies")).json()}
    assert doomed not in listed and client.agency in listed
    made = await client.http.post(f"/agency/{doomed}/agents", json={"agentType": "worker"})
    assert made.status_code == 404, made.text
    again = await client.http.delete(f"/agencies/{doomed}")
    assert again.status_code == 200 and again.json()["requestId"] == body["requestId"]
    assert (await client.http.delete("/agencies/nosuch")).status_code == 404


async def test_a_thread_made_while_its_agency_is_deleted_is_deleted_too(
    client: Client, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread created after the deletion listed the agency's threads, before
    `agency.deleted` stopped new ones: every listing made before that record misses it."""
    doomed = await second_agency(client)
    listed = await user_thread(client, doomed, "gina")
    late = await user_thread(client, doomed, "gina")
    real = scope_erasure.thread_creations

    async def before_the_late_thread(nc: Any, tenant: str, **options: Any) -> list[Creation]:
        found = await real(nc, tenant, **options)
        events = await bus.store.read(client.tenant, "agency", doomed)
        if isinstance(events[-1].payload, AgencyDeleted):
            return found
        return [c for c in found if c.thread_id != late]

    monkeypatch.setattr(scope_erasure, "thread_creations", before_the_late_thread)
    r = await client.http.delete(f"/agencies/{doomed}")
    assert r.status_code == 200, r.text
    assert r.json()["threads"] == [listed]

    async def both_gone() -> None:
        assert await status_of(client, doomed, listed) in (404, 410)
        assert await status_of(client, doomed, late) in (404, 410)
        r = await client.http.get(f"/langgraph/threads/{late}")
        assert r.status_code == 410, r.text

    await assert_eventually(both_gone, timeout=30, interval=0.2)


async def test_an_agency_deletion_recorded_but_not_carried_out_is_finished_from_the_log(
    client: Client, bus: Bus
) -> None:
    doomed = await second_agency(client)
    thread = await user_thread(client, doomed, "frank")
    position = await bus.store.last_position(client.tenant, "tenant", client.tenant)
    request = AgencyDeletionRequested(agency_id=doomed, requested_by="admin")
    await bus.store.append(client.tenant, "tenant", client.tenant, [request], expected=position)

    async def finished() -> None:
        events = await bus.store.read(client.tenant, "agency", doomed)
        last = events[-1].payload
        assert isinstance(last, AgencyDeleted) and last.threads == (thread,)
        assert await status_of(client, client.agency, thread) == 410

    await assert_eventually(finished, timeout=30, interval=0.2)


async def test_the_admin_deletes_every_agency_of_a_tenant(client: Client) -> None:
    other = await second_agency(client)
    threads = [
        await user_thread(client, client.agency, "gina"),
        await user_thread(client, other, "gina"),
    ]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    path = f"/tenants/{client.tenant}/agencies"
    refused = await client.http.delete(path)
    assert refused.status_code == 403, refused.text
    r = await client.http.delete(path, headers=admin)
    assert r.status_code == 200, r.text
    deleted = {d["agencyId"]: d for d in r.json()}
    assert set(deleted) == {client.agency, other}
    assert all(d["requestedBy"] == "admin" for d in deleted.values())
    assert sorted(t for d in deleted.values() for t in d["threads"]) == sorted(threads)
    assert (await client.http.get("/agencies")).json() == []
    again = await client.http.delete(path, headers=admin)
    assert again.status_code == 200 and again.json() == []


async def test_the_admin_cli_deletes_every_agency_of_a_tenant(
    client: Client, tmp_path: Path
) -> None:
    thread = await user_thread(client, client.agency, "ivy")
    endpoints = Endpoints(
        pid=os.getpid(), nats_url="nats://unused", database_url="postgresql://unused",
        api_url=str(client.http.base_url), admin_secret=ADMIN,
    )  # fmt: skip
    write_endpoints(tmp_path, endpoints)
    parser = argparse.ArgumentParser(prog="agency")
    tenants_cmd.register(parser.add_subparsers(dest="group", required=True))
    argv = ["tenants", "delete-agencies", client.tenant, "--data-dir", str(tmp_path)]
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    with capture_logs(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = await args.handler(args)
    assert status == 0, err.getvalue()
    assert f"{client.agency}  1 thread(s)" in out.getvalue()
    assert await status_of(client, client.agency, thread) in (404, 410)
    assert (await client.http.get("/agencies")).json() == []
