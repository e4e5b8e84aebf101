"""NUL characters and very long paths over HTTP: a 400 saying what is wrong, never stored."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from agency.contracts.limits import limits
from agency.infra.jetstream.connection import Bus
from tests.api.conftest import Api, Tenant, Thread, running_api

NUL_FREE = "contains a NUL character (\\u0000), which cannot be stored"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param({"messages": [{"content": "hi\x00"}]}, f"`content` {NUL_FREE}", id="message"),
        pytest.param({"files": {"a.md": "x\x00y"}}, f"`files` {NUL_FREE}", id="file-content"),
        pytest.param({"files": {"a\x00.md": "x"}}, "`files` " + NUL_FREE, id="file-path"),
        pytest.param({"files": {"p" * 10_000: "x"}},
                     "field 'files' (a key): Expected `str` of length <= 512", id="long-path"),
        pytest.param({"files": {" ": "x"}}, "field 'files' (a key): Expected `str` matching regex", id="blank-path"),
    ],
)  # fmt: skip
async def test_invoke_with_nul_or_a_long_path_is_refused_and_nothing_is_sent(
    client: httpx.AsyncClient, thread_a: Thread, bus: Bus, body: dict[str, object], expected: str
) -> None:
    r = await client.post(thread_a.path + "/invoke", json=body, headers=thread_a.tenant.auth)
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"]
    events = await bus.store.read(thread_a.tenant.id, "thread", thread_a.thread_id)
    assert [e.type for e in events] == ["thread.created"]


async def test_nul_anywhere_in_a_body_is_refused_naming_the_field(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency = await client.post("/agencies", json={"name": "a\x00"}, headers=tenant_a.auth)
    assert agency.status_code == 400 and f"`name` {NUL_FREE}" in agency.json()["error"]

    ok = await client.post("/agencies", json={"name": "ok"}, headers=tenant_a.auth)
    spec = {"name": "bp", "config": {"extra": {"k": ["a\x00"]}}}
    r = await client.post(f"/agency/{ok.json()['id']}/blueprints", json=spec, headers=tenant_a.auth)
    assert r.status_code == 400 and f"`extra` {NUL_FREE}" in r.json()["error"]


async def test_a_long_path_within_the_limit_and_unicode_text_are_accepted(
    client: httpx.AsyncClient, thread_a: Thread
) -> None:
    body = {"messages": [{"content": "ünïcode \\u0000 as text"}], "files": {"d/" * 255: "x"}}
    r = await client.post(thread_a.path + "/invoke", json=body, headers=thread_a.tenant.auth)
    assert r.status_code == 202, r.text


async def test_an_invoke_larger_than_one_request_can_carry_is_refused(
    client: httpx.AsyncClient, thread_a: Thread, api: Api
) -> None:
    """Within the body limit of this server, beyond what one request event may hold."""
    limit = limits().max_request_bytes
    body = {"files": {"big.txt": "z" * (limit + 1)}}
    async with (
        running_api(
            replace(api.deps, settings=replace(api.settings, max_body_bytes=4 * limit))
        ) as url,
        httpx.AsyncClient(base_url=url) as big,
    ):
        r = await big.post(thread_a.path + "/invoke", json=body, headers=thread_a.tenant.auth)
    assert r.status_code == 400, r.text
    assert f"exceed the {limit} bytes one request can carry" in r.json()["error"]
