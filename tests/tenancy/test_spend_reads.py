"""What a spend check reads of the log: nothing where no budget is in force, and at the
HTTP door the spend as read within the last second; the runtime's check before a model
call reads to the log's end."""

from __future__ import annotations

from agency.contracts.events import ChatMessage, ModelCompleted, ThreadCreated, Usage
from agency.contracts.ids import new_id
from agency.contracts.records import EventContext
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position
from agency.services.tenancy.spend import BUDGET_EXCEEDED, Budget, SpendSettings, Spent
from agency.services.tenancy.spend_ledger import SpendLedger

AGENCY = "a1"


async def _spend(bus: Bus, tenant: str, thread: str, tokens: int, after: Position) -> Position:
    answer = ModelCompleted(
        run_id="r1",
        step=1,
        model="m",
        message=ChatMessage(role="assistant", content="spent"),
        usage=Usage(input_tokens=tokens),
    )
    written = await bus.store.append(
        tenant, "thread", thread, [answer], expected=after,
        context=EventContext(agency_id=AGENCY, thread_id=thread),
    )  # fmt: skip
    return written.position


async def _thread(bus: Bus, tenant: str) -> tuple[str, Position]:
    thread = new_id()
    created = ThreadCreated(agency_id=AGENCY, agent_type="worker")
    written = await bus.store.append(tenant, "thread", thread, [created], expected=Position())
    return thread, written.position


async def test_with_no_budget_in_force_a_check_reads_no_spend(bus: Bus, tenant: str) -> None:
    thread, at = await _thread(bus, tenant)
    await _spend(bus, tenant, thread, 500, at)
    ledger = SpendLedger(bus, SpendSettings(tenant=Budget(), agency=Budget()))
    assert await ledger.refusal(tenant, AGENCY, Spent(tokens=10**9)) is None
    unread = await ledger.standing(tenant, AGENCY, counted=False)
    assert unread.tenant_spent == Spent()
    # Asked for, the spend is read all the same.
    read = await ledger.standing(tenant, AGENCY)
    assert read.tenant_spent.tokens == 500 and read.agency_spent.tokens == 500


async def test_the_door_takes_the_spend_as_read_lately_and_the_model_call_reads_it_anew(
    bus: Bus, tenant: str
) -> None:
    thread, at = await _thread(bus, tenant)
    at = await _spend(bus, tenant, thread, 600, at)
    ledger = SpendLedger(bus, SpendSettings(tenant=Budget(tokens=1_000), agency=Budget()))
    assert await ledger.refusal(tenant, AGENCY, Spent()) is None  # 600 of 1,000 spent
    await _spend(bus, tenant, thread, 600, at)
    # Read a moment ago: within a minute's freshness, the door does not read again.
    assert await ledger.refusal(tenant, AGENCY, Spent(), fresh_within=60.0) is None
    refused = await ledger.refusal(tenant, AGENCY, Spent())
    assert refused is not None and refused.startswith(BUDGET_EXCEEDED), refused
    assert "1200 spent" in refused
    # Now read, the spend refuses at the door too.
    assert await ledger.refusal(tenant, AGENCY, Spent(), fresh_within=60.0) == refused
