"""Bounded spend: a model call that would pass the tenant's or its agency's budget is
refused before it is made, its prompt counted, and the run ends with the reason; an HTTP
invoke while the budget is spent answers 429 naming the budget and when it resets. What
was spent is counted from the log, so another process (or a restarted one) agrees."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agency.contracts.commands import InvokeThread
from agency.contracts.events import ChatMessage, RunCompleted, RunError, Usage
from agency.contracts.ids import new_id
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.records import RecordedEvent
from agency.services.cli.main import build_parser
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.tenancy.spend import (
    BUDGET_EXCEEDED,
    Budget,
    Overrides,
    SpendSettings,
    budgets,
    period_end,
    period_start,
)
from agency.services.tenancy.spend_ledger import SpendLedger
from tests.e2e.conftest import ADMIN, System
from tests.fairness.conftest import Tenant
from tests.helpers import assert_eventually


def _run_error(events: list[RecordedEvent]) -> RunError:
    errors = [e.payload for e in events if isinstance(e.payload, RunError)]
    assert errors, [e.type for e in events]
    return errors[-1]


def _sent(tenant: Tenant, key: str) -> bool:
    return any(key in json.dumps(body) for body in tenant.llm.requests)


async def test_a_call_whose_prompt_alone_passes_the_tenants_budget_is_refused_unsent(
    tenant: Tenant,
) -> None:
    r = await tenant.admin.put(f"/tenants/{tenant.id}/budget", json={"tokens": 4000})
    assert r.status_code == 200, r.text
    assert r.json()["tokenBudget"] == 4000 and r.json()["tokensSpent"] == 0
    # About 5,000 tokens of prompt: nothing is spent yet, but this call alone passes 4,000.
    prompt = "You answer at length. " * 900
    blueprint = {"name": "long", "prompt": prompt, "tags": ["default"]}
    r = await tenant.http.post(f"/agency/{tenant.agency}/blueprints", json=blueprint)
    assert r.status_code in (201, 202), r.text
    thread = await tenant.thread("long")
    key = "spend-" + new_id().lower()
    r = await tenant.invoke(thread, key)
    assert r.status_code == 202, r.text

    error = _run_error(await tenant.wait_terminal(thread))
    assert error.kind == BUDGET_EXCEEDED, error
    assert f"the tenant {tenant.id!r} token budget is 4000 tokens a day" in error.error
    assert "0 spent" in error.error and "(the prompt counted)" in error.error
    needed = int(error.error.split("needs about ")[1].split(" ")[0])
    assert needed >= len(prompt) // 4
    assert "resets at" in error.error
    assert not _sent(tenant, key), "the refused call reached the model"


async def _spent_seen(tenant: Tenant, path: str, field: str, at_least: float) -> None:
    """Until the API's spend ledger shows what the run spent (it reads the log at most once
    a second per tenant)."""

    async def seen() -> None:
        r = await tenant.http.get(path)
        assert r.status_code == 200 and r.json()[field] >= at_least - 1e-9, r.text

    await assert_eventually(seen, timeout=20)


async def test_spent_budget_refuses_the_next_model_call_and_http_invokes_with_429(
    tenant: Tenant,
) -> None:
    r = await tenant.admin.put(f"/tenants/{tenant.id}/budget", json={"tokens": 10_000})
    assert r.status_code == 200, r.text
    key = "spend-" + new_id().lower()
    usage = Usage(input_tokens=9_000, output_tokens=1_000)
    tenant.llm.script(key, [ScriptStep(content="a costly answer", usage=usage)])
    thread = await tenant.thread()
    assert (await tenant.invoke(thread, key)).status_code == 202
    events = await tenant.wait_terminal(thread)
    assert any(isinstance(e.payload, RunCompleted) for e in events), [e.type for e in events]

    # The budget is spent (the API's ledger reads it within its refresh): HTTP invokes are
    # refused at the door, saying which and when.
    await _spent_seen(tenant, "/budget", "tokensSpent", 10_000)
    r = await tenant.invoke(thread, "more")
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error.startswith(BUDGET_EXCEEDED) and f"tenant {tenant.id!r}" in error, error
    assert "10000 tokens a day; 10000 spent" in error and "resets at" in error
    assert int(r.headers["Retry-After"]) >= 1
    r = await tenant.http.post(
        "/langgraph/runs/wait",
        json={"assistant_id": "worker", "input": {"messages": [{"role": "user", "content": "x"}]}},
    )
    assert r.status_code == 429 and BUDGET_EXCEEDED in r.text, r.text
    r = await tenant.http.post("/serve", json={"agent": "worker", "message": "x"})
    assert r.status_code == 429 and BUDGET_EXCEEDED in r.text, r.text
    r = await tenant.http.get("/budget")
    assert r.status_code == 200 and r.json()["tokensSpent"] == 10_000, r.text

    # Past the HTTP door, on the bus: the run starts and its model call is refused.
    later = "later-" + new_id().lower()
    await tenant.bus.commands.send(
        tenant.id,
        InvokeThread(
            agency_id=tenant.agency,
            thread_id=thread,
            run_id="run_" + new_id(),
            messages=(ChatMessage(role="user", content=later),),
        ),
    )
    error = _run_error(await tenant.wait_terminal(thread, count=2))
    assert error.kind == BUDGET_EXCEEDED and "10000 spent" in error.error, error
    assert not _sent(tenant, later)

    # Another process, or this one restarted, counts the same spend from the log.
    fresh = SpendLedger(tenant.bus)
    standing = await fresh.standing(tenant.id, tenant.agency)
    assert standing.tenant_spent.tokens == 10_000 and standing.tenant.tokens == 10_000


async def test_an_agencys_cost_budget_is_set_within_the_tenants_and_holds(
    tenant: Tenant,
) -> None:
    r = await tenant.admin.put(f"/tenants/{tenant.id}/budget", json={"usd": 1.0})
    assert r.status_code == 200, r.text
    path = f"/agency/{tenant.agency}/budget"
    r = await tenant.http.put(path, json={"usd": 2.0})
    assert r.status_code == 409 and "within the tenant's, $1 a day" in r.json()["error"], r.text
    r = await tenant.http.put(path, json={"usd": 0.1})
    assert r.status_code == 200 and r.json()["usdBudget"] == 0.1, r.text
    # gpt-4o-mini input costs $0.15 a million tokens: this answer costs $0.15.
    blueprint = {"name": "priced", "prompt": "Be brief.", "model": "gpt-4o-mini"}
    r = await tenant.http.post(f"/agency/{tenant.agency}/blueprints", json=blueprint)
    assert r.status_code in (201, 202), r.text
    key = "priced-" + new_id().lower()
    usage = Usage(input_tokens=1_000_000, output_tokens=0)
    tenant.llm.script(key, [ScriptStep(content="priced answer", usage=usage)])
    thread = await tenant.thread("priced")
    assert (await tenant.invoke(thread, key)).status_code == 202
    events = await tenant.wait_terminal(thread)
    assert any(isinstance(e.payload, RunCompleted) for e in events), [e.type for e in events]

    await _spent_seen(tenant, path, "usdSpent", 0.15)
    r = await tenant.invoke(thread, "again")
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert f"the agency {tenant.agency!r} cost budget is $0.1 a day" in error, error
    r = await tenant.http.get(path)
    assert r.status_code == 200 and abs(r.json()["usdSpent"] - 0.15) < 1e-6, r.text
    # The tenant's own budget still has room: only this agency is held.
    r = await tenant.http.get("/budget")
    assert r.json()["usdBudget"] == 1.0 and abs(r.json()["usdSpent"] - 0.15) < 1e-6


def test_budgets_take_the_level_above_where_unset_and_an_agencys_stays_within_the_tenants() -> None:
    settings = SpendSettings(tenant=Budget(tokens=1000, usd=5.0), agency=Budget(tokens=0))
    tenant, agency = budgets(settings, Overrides(tenant_usd=2.0, agency_tokens=5000))
    assert tenant == Budget(tokens=1000, usd=2.0)
    assert agency == Budget(tokens=1000, usd=2.0)  # 5000 is beyond the tenant's 1000
    _, agency = budgets(settings, Overrides(agency_tokens=10, agency_usd=0.5))
    assert agency == Budget(tokens=10, usd=0.5)
    off, _ = budgets(settings, Overrides(tenant_tokens=0, tenant_usd=0.0))
    assert off == Budget()  # switched off for this tenant by the operator


def test_a_period_resets_at_the_next_utc_day_or_month() -> None:
    now = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)
    assert period_start("day", now) == datetime(2026, 12, 31, tzinfo=UTC)
    assert period_end("day", now) == datetime(2027, 1, 1, tzinfo=UTC)
    assert period_start("month", now) == datetime(2026, 12, 1, tzinfo=UTC)
    assert period_end("month", now) == datetime(2027, 1, 1, tzinfo=UTC)
    assert period_end("month", datetime(2026, 2, 10, tzinfo=UTC)) == datetime(
        2026, 3, 1, tzinfo=UTC
    )


async def test_the_operator_sets_and_reads_a_tenants_budget_with_the_cli(
    tenant: Tenant, fair_system: System, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_endpoints(
        tmp_path,
        Endpoints(
            pid=os.getpid(), nats_url="nats://unused", database_url="postgresql://unused",
            api_url=fair_system.url, admin_secret=ADMIN,
        ),
    )  # fmt: skip
    data_dir = ["--data-dir", str(tmp_path)]
    args = build_parser().parse_args(
        ["tenants", "budget", tenant.id, "--tokens", "5000", "--usd", "2.5", *data_dir]
    )
    assert await args.handler(args) == 0
    assert "per day: 5000 tokens, $2.5; spent 0 tokens" in capsys.readouterr().out
    r = await tenant.http.get("/budget")
    assert r.json()["tokenBudget"] == 5000 and r.json()["usdBudget"] == 2.5, r.text

    args = build_parser().parse_args(["tenants", "budget", tenant.id, "--tokens", "0", *data_dir])
    assert await args.handler(args) == 0
    # The budget is set whole: the USD one not given is the operator's default again.
    assert "per day: no limit tokens, $10;" in capsys.readouterr().out
    args = build_parser().parse_args(["tenants", "budget", "nosuchtenant", *data_dir])
    assert await args.handler(args) == 1
    assert "404" in capsys.readouterr().err
