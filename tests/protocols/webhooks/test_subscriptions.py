"""Subscriptions as a tenant manages them: over HTTP and with `agency webhooks`, refused
clearly when wrong, invisible to other tenants."""

from __future__ import annotations

import os
from pathlib import Path

import asyncpg
import httpx
import pytest

from agency.infra.endpoints import Endpoints, write_endpoints
from agency.services.llm.fake_scripts import ScriptStep
from tests.helpers import run_agency
from tests.langgraph.conftest import new_tenant
from tests.protocols.webhooks.conftest import Agency, System
from tests.protocols.webhooks.receiver import Receiver, receiving


async def agency_cli(*args: str) -> tuple[int, str, str]:
    return await run_agency("webhooks", *args)


async def a_run(agency: Agency, text: str) -> str:
    key = f"{text}-{agency.agency}"
    agency.llm.script(key, [ScriptStep(content="done")])
    return await agency.invoke(await agency.thread(), key)


async def test_the_cli_adds_lists_shows_deliveries_and_removes(
    agency: Agency, receiver: Receiver, webhook_system: System, tmp_path: Path
) -> None:
    endpoints = Endpoints(
        pid=os.getpid(), nats_url="nats://unused", database_url="postgresql://unused",
        api_url=webhook_system.url, api_key=agency.key,
    )  # fmt: skip
    write_endpoints(tmp_path, endpoints)
    where = ("--agency", agency.agency, "--data-dir", str(tmp_path))
    code, out, err = await agency_cli("add", "ftp://example.com/x", *where)
    assert code == 1 and "only http(s) URLs" in err and "HTTP 400" in err, err
    code, out, err = await agency_cli("add", receiver.url, "--events", "run.ended", *where)
    assert code == 0, err
    webhook = out.split()[1].rstrip(":")
    receiver.secret = out.split("secret (shown once): ")[1].strip()
    run = await a_run(agency, "cli")
    (delivery,) = (await receiver.until(1)).values()
    assert delivery.body["data"]["runId"] == run
    code, out, err = await agency_cli("ls", *where)
    assert code == 0 and webhook in out and receiver.url in out and "whsec_" not in out, err
    code, out, err = await agency_cli("deliveries", webhook, *where)
    assert code == 0 and delivery.id in out and "run.ended" in out, err
    code, out, err = await agency_cli("rm", webhook, *where)
    assert code == 0 and "removed" in out, err
    code, out, err = await agency_cli("ls", *where)
    assert code == 0 and webhook not in out, err
    code, out, err = await agency_cli("deliveries", webhook, *where)
    assert code == 1 and f"no webhook {webhook}" in err and "HTTP 404" in err


@pytest.mark.parametrize(
    ("body", "status", "said"),
    [
        ({"url": "http://10.0.0.7/hook", "events": ["run.ended"]}, 403, "AGENCY_ALLOW_HOSTS"),
        ({"url": "http://localhost:9/hook", "events": ["run.ended"]}, 403, "AGENCY_ALLOW_HOSTS"),
        ({"url": "ftp://example.com/x", "events": ["run.ended"]}, 400, "only http(s) URLs"),
        ({"url": "https://example.com/a\x05b", "events": ["run.ended"]}, 400, "control character"),
        ({"url": "https://example.com/x", "events": ["run.over"]}, 400, "events"),
        ({"url": "https://example.com/x", "events": []}, 400, "events"),
        ({"url": "https://example.com/x", "events": ["run.ended"], "secret": "x"}, 400, "secret"),
        ({"events": ["run.ended"]}, 400, "url"),
    ],
    ids=[
        "private",
        "loopback",
        "scheme",
        "control",
        "unknown-kind",
        "no-kind",
        "unknown-field",
        "no-url",
    ],
)
async def test_a_bad_subscription_is_refused_with_what_is_wrong(
    agency: Agency,
    body: dict[str, object],
    status: int,
    said: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Malformed is a 400; an address the egress rule forbids, a 403; each says why."""
    monkeypatch.delenv("AGENCY_ALLOW_HOSTS")
    r = await agency.http.post(agency.webhooks, json=body)
    assert r.status_code == status and said in r.json()["error"], r.text
    assert (await agency.http.get(agency.webhooks)).json()["webhooks"] == []


async def test_another_tenants_subscriptions_are_not_found(
    agency: Agency, receiver: Receiver, webhook_system: System
) -> None:
    created = await agency.subscribe(receiver.url, ["run.ended"])
    key, _, _ = await new_tenant(webhook_system.url, "other")
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=webhook_system.url, headers=headers) as other:
        mine = f"{agency.webhooks}/{created['id']}"
        for answer in (
            await other.get(agency.webhooks),
            await other.post(agency.webhooks, json={"url": receiver.url, "events": ["run.ended"]}),
            await other.delete(mine),
            await other.get(f"{mine}/deliveries"),
        ):
            assert answer.status_code == 404 and "not found" in answer.json()["error"], answer.text
    assert [w["id"] for w in (await agency.http.get(agency.webhooks)).json()["webhooks"]] == [
        created["id"]
    ]
    r = await agency.http.delete(f"{agency.webhooks}/wh_unknown")
    assert r.status_code == 404 and "no webhook wh_unknown" in r.json()["error"]
    r = await agency.http.get(f"{mine}/deliveries", params={"limit": "0"})
    assert r.status_code == 400 and "limit" in r.json()["error"]


async def test_a_removed_subscription_gets_nothing_more(
    agency: Agency, receiver: Receiver, webhook_system: System
) -> None:
    kept = await agency.subscribe(receiver.url, ["run.ended"])
    receiver.secret = kept["secret"]
    async with receiving() as removed_receiver:
        removed = await agency.subscribe(removed_receiver.url, ["run.ended"])
        r = await agency.http.delete(f"{agency.webhooks}/{removed['id']}")
        assert r.status_code == 204, r.text
        run = await a_run(agency, "removed")
        (delivery,) = (await receiver.until(1)).values()
        assert delivery.body["data"]["runId"] == run
        assert removed_receiver.requests == [] and removed_receiver.refused == []
    conn = await asyncpg.connect(webhook_system.database_url)
    try:
        made = await conn.fetch(
            "SELECT subscription_id FROM webhook_deliveries WHERE tenant_id = $1", agency.tenant
        )
    finally:
        await conn.close()
    assert [m["subscription_id"] for m in made] == [kept["id"]]
