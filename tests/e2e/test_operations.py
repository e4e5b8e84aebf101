"""What an operator sees: metrics of real runs, one trace per run, dead letters re-driven."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import sys
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agency.contracts.commands import CreateAgency, CreateThread
from agency.contracts.events.base import Usage
from agency.contracts.ids import new_id
from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.deadletter import DeadLetter
from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import ADMIN, Client
from tests.e2e.test_http_runs import call, done
from tests.helpers import assert_eventually

REPO = Path(__file__).resolve().parents[2]
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition text; fails if it is not there."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        match = re.match(r"^([a-z_]+)(\{[^}]*\})? (\S+)$", line)
        if not match or match.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(match.group(3))
    raise AssertionError(f"no sample {name}{labels}")


async def test_metrics_show_runs_latencies_tokens_cost_lag_and_dead_letters(
    client: Client,
) -> None:
    blueprint = {"name": "metered", "prompt": "You answer.", "model": "openai:gpt-4o-mini",
                 "tags": ["default", "lookup"]}  # fmt: skip
    r = await client.http.post(f"/agency/{client.agency}/blueprints", json=blueprint)
    assert r.status_code == 201, r.text
    key = "metrics-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=[call("lookup", word="m")], usage=Usage(input_tokens=1000, output_tokens=10)),
        ScriptStep(content="measured", usage=Usage(input_tokens=2000, output_tokens=20)),
    ])  # fmt: skip
    thread = await client.thread("metered")
    await client.invoke(thread, key)
    await client.until(thread, done)
    tenant = client.tenant
    base = str(client.http.base_url)
    async with httpx.AsyncClient(base_url=base, timeout=20) as admin:
        refused = await admin.get("/metrics", headers=client.http.headers)
        assert refused.status_code == 403

        async def scraped() -> str:
            r = await admin.get("/metrics", headers=ADMIN_AUTH)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
            text = r.text
            assert sample(text, "agency_runs", tenant=tenant, status="completed") >= 1
            assert sample(text, "agency_tokens", tenant=tenant, kind="input") == 3000
            assert sample(text, "agency_cost_usd", tenant=tenant) == pytest.approx(
                3000 * 0.15e-6 + 30 * 0.60e-6
            )
            assert sample(text, "agency_model_call_seconds_count", model="gpt-4o-mini") >= 2
            assert (
                sample(text, "agency_tool_call_seconds_count", tool="lookup", outcome="output") >= 1
            )
            assert sample(text, "agency_step_seconds_count", tenant=tenant) >= 2
            return text

        text = await assert_eventually(scraped, timeout=15)
    assert sample(text, "agency_consumer_pending", stream="AGENCY_EVENTS", consumer="tools") >= 0
    assert sample(text, "agency_projection_lag_events", projection="threads") >= 0
    assert "agency_dead_letters" in text


async def test_each_run_has_one_root_span_that_its_services_continue(
    client: Client,
    spans: InMemorySpanExporter,
) -> None:
    key = "root-span-" + client.agency
    client.llm.script(key, [ScriptStep(tool_calls=[call("lookup", word="s")]),
                            ScriptStep(content="traced")])  # fmt: skip
    thread = await client.thread()
    run_id = await client.invoke(thread, key)
    await client.until(thread, done)

    def spans_of_run() -> list[str]:
        finished = spans.get_finished_spans()
        roots = [s for s in finished if s.name == f"run {run_id}"]
        assert len(roots) == 1 and roots[0].parent is None
        trace_id = roots[0].context.trace_id
        return [s.name for s in finished if s.context.trace_id == trace_id]

    async def followed() -> list[str]:
        names = spans_of_run()
        assert {"send runtime.invoke", "handle runtime.invoke", "handle tool.requested"} <= set(
            names
        )
        assert any(n.startswith("model ") for n in names)
        return names

    await assert_eventually(followed, timeout=10)


async def test_a_dead_lettered_command_is_listed_shown_and_replayed_once_its_cause_is_fixed(
    client: Client, bus: Bus
) -> None:
    tenant = client.tenant
    agency_id = "later" + client.agency[-8:].lower()
    thread_id = "orphan" + client.agency[-8:].lower()
    # A thread in an agency that does not exist yet: the registry refuses it for good.
    command = CreateThread(agency_id=agency_id, thread_id=thread_id, agent_type="worker")
    await bus.commands.send(tenant, command, idempotency_key="dlq-" + thread_id)
    base = str(client.http.base_url)
    async with httpx.AsyncClient(base_url=base, timeout=20, headers=ADMIN_AUTH) as admin:

        async def lettered() -> dict[str, object]:
            r = await admin.get("/dlq", params={"tenant": tenant, "reason": "unknown_agency"})
            assert r.status_code == 200, r.text
            letters = r.json()
            assert len(letters) == 1, letters
            return dict(letters[0])

        letter = await assert_eventually(lettered, timeout=15)
        assert letter["replayable"] is True and letter["tenantId"] == tenant
        shown = (await admin.get(f"/dlq/{letter['seq']}")).json()
        assert thread_id in shown["data"] and shown["dataEncoding"] == "utf-8"

        await bus.commands.send(tenant, CreateAgency(agency_id=agency_id, name="late"),
                                idempotency_key="dlq-agency-" + agency_id)  # fmt: skip

        async def agency_exists() -> None:
            events = await bus.store.read(tenant, "agency", agency_id)
            assert any(e.type == "agency.created" for e in events)

        await assert_eventually(agency_exists, timeout=10)
        r = await admin.post(f"/dlq/{letter['seq']}/replay")
        assert r.status_code == 200, r.text

        async def thread_created() -> None:
            events = await bus.store.read(tenant, "thread", thread_id)
            assert [e.type for e in events] == ["thread.created"]

        await assert_eventually(thread_created, timeout=10)
        assert (await admin.get(f"/dlq/{letter['seq']}")).status_code == 404
        assert (await admin.post(f"/dlq/{letter['seq']}/replay")).status_code == 404
        tenant_refused = await client.http.get("/dlq")
        assert tenant_refused.status_code == 403


async def test_the_dlq_command_lists_shows_refuses_to_replay_an_event_and_drops_it(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    tenant = "t" + new_id().lower()
    subject = f"tenant.{tenant}.evt.thread.x1.tool_requested"
    letter = DeadLetter(
        source_stream=EVENTS_STREAM, subject=subject, stream_seq=secrets.randbelow(10**9), reason="poison",
        detail="not an event", data=b"\xffgarbage", consumer="tools", deliveries=1,
    )  # fmt: skip
    await bus.dead_letters.put(letter)
    write_endpoints(tmp_path, Endpoints(pid=os.getpid(), nats_url=nats_url, database_url=""))

    async def agency(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agency.services.cli.main", "dlq", *args, "--data-dir", str(tmp_path),
            cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        return proc.returncode or 0, out.decode(), err.decode()

    code, out, err = await agency("ls", "--tenant", tenant, "--json")
    assert code == 0, err
    (listed,) = json.loads(out)
    assert listed["reason"] == "poison" and listed["replayable"] is False
    seq = str(listed["seq"])
    code, _, err = await agency("replay", seq)
    assert code == 1 and "only commands can be re-driven" in err
    code, out, _ = await agency("drop", seq)
    assert code == 0 and f"dropped {seq}" in out
    code, _, err = await agency("show", seq)
    assert code == 1 and f"no dead letter {seq}" in err
