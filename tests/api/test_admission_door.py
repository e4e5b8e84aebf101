"""Each tenant's share of a saturated API process: past it, a request is answered 429 with
`Retry-After` (the message says the same seconds) before the route runs; a tenant under its
share is admitted whatever the others hold."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from agency.services.api.deps import ApiDeps
from agency.services.tenancy.admission import ADMISSION_LIMIT, Admission, AdmissionSettings
from tests.api.conftest import Api, Thread, create_tenant, create_thread, running_api
from tests.helpers import assert_eventually

# One request in flight and one read open at a time for the whole process.
ONE = AdmissionSettings(initial_limit=1, min_limit=1, max_limit=1, max_open=1)


@dataclasses.dataclass
class Door:
    url: str
    admission: Admission


@pytest.fixture
async def door(api: Api) -> AsyncIterator[Door]:
    admission = Admission(ONE)
    deps: ApiDeps = dataclasses.replace(api.deps, admission=admission)
    async with running_api(deps) as url:
        yield Door(url, admission)


def _refused_with_retry_after(r: httpx.Response) -> None:
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error.startswith(ADMISSION_LIMIT), error
    wait = r.headers["Retry-After"]
    assert int(wait) >= 1
    assert re.search(rf"retry in {wait} s$", error), (wait, error)


async def test_a_write_past_the_tenants_share_is_refused_and_another_tenant_is_admitted(
    client: httpx.AsyncClient, api: Api, door: Door
) -> None:
    b, a = await create_tenant(client, api, "b"), await create_tenant(client, api, "a")
    held = door.admission.enter(b.id, 0.0)  # b's request in flight fills the process
    async with httpx.AsyncClient(base_url=door.url, timeout=15) as http:
        body = {"name": "flood"}
        _refused_with_retry_after(await http.post("/agencies", json=body, headers=b.auth))
        r = await http.post("/agencies", json={"name": "calm"}, headers=a.auth)
        assert r.status_code == 201, r.text
        held.done(1.0)
        r = await http.post("/agencies", json=body, headers=b.auth)
        assert r.status_code == 201, r.text
    assert door.admission.work.total == 0


async def test_a_stream_past_the_tenants_share_is_refused_and_another_tenant_reads(
    client: httpx.AsyncClient, api: Api, door: Door
) -> None:
    thread: Thread = await create_thread(client, await create_tenant(client, api, "b"))
    a = await create_tenant(client, api, "a")
    b = thread.tenant
    async with httpx.AsyncClient(base_url=door.url, timeout=15) as http:
        async with http.stream("GET", f"{thread.path}/stream", headers=b.auth) as stream:
            assert stream.status_code == 200
            assert door.admission.reads.held[b.id] == 1
            _refused_with_retry_after(await http.get(thread.path, headers=b.auth))
            r = await http.get("/agencies", headers=a.auth)
            assert r.status_code == 200, r.text

        async def closed() -> None:
            assert door.admission.reads.total == 0

        await assert_eventually(closed, timeout=30)  # the server saw the stream closed
        r = await http.get(thread.path, headers=b.auth)
        assert r.status_code == 200, r.text


async def test_a_write_past_the_tenants_share_is_refused_before_its_body_is_sent(
    client: httpx.AsyncClient, api: Api, door: Door
) -> None:
    """The 429 comes on the headers alone: a 200 KB body announced is never waited for."""
    b = await create_tenant(client, api, "b")
    held = door.admission.enter(b.id, 0.0)
    url = httpx.URL(door.url)
    assert url.host and url.port
    head = ["POST /agencies HTTP/1.1", f"Host: {url.host}", "Content-Type: application/json"]
    head += [f"{name}: {value}" for name, value in b.auth.items()]
    head += ["Content-Length: 200000", "", ""]
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write("\r\n".join(head).encode())
        await writer.drain()
        async with asyncio.timeout(10):
            status = await reader.readline()
            lines = []
            while (line := await reader.readline()) not in (b"\r\n", b""):
                lines.append(line.decode().strip())
            headers = dict(line.lower().split(": ", 1) for line in lines)
            body = await reader.readexactly(int(headers["content-length"]))
    finally:
        writer.close()
        held.done(1.0)
    assert status.split()[1] == b"429", status
    error = json.loads(body)
    assert error["status"] == 429
    assert error["error"].startswith(ADMISSION_LIMIT)
    assert re.search(rf"retry in {headers['retry-after']} s$", error["error"]), (headers, error)
    assert headers["content-type"] == "application/json"
