"""The agent-system read models, built from real events on NATS into real PostgreSQL."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest
from litestar import Litestar, Request
from litestar.di import Provide

from agency.contracts.events import (
    AgencyCreated,
    AgentStarted,
    AnyEvent,
    ApiKeyIssued,
    ApiKeyRevoked,
    BlueprintDeleted,
    BlueprintSaved,
    BlueprintSpec,
    BlueprintSwitched,
    ChatMessage,
    CheckpointSaved,
    FileWritten,
    HitlInterrupt,
    HitlResume,
    MessageAppended,
    ModelCompleted,
    ModelDelta,
    ParentRef,
    RequestAccepted,
    RequestRejected,
    RunCompleted,
    RunPaused,
    RunResumed,
    RunStarted,
    RunTick,
    StateRestored,
    SubagentCompleted,
    SubagentSpawned,
    TenantCreated,
    ThreadCreated,
    Todo,
    TodosWritten,
    ToolCall,
    ToolOutput,
    ToolRegistered,
    ToolRequested,
    Usage,
)
from agency.contracts.ids import new_id
from agency.contracts.subjects import Aggregate
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext, Position
from agency.projections import agency_queries, queries, state_queries
from agency.projections.catalog import ALL
from agency.projections.checksum import projection_checksum
from agency.projections.engine import CHECKPOINTS, LIVE_SCHEMA, ProjectionRunner, ensure_tables
from agency.projections.rebuild import last_stream_seq, rebuild
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import define_tool
from agency.services.api.deps import ApiDeps, ApiSettings, Principal
from agency.services.api.routes_queries import QUERY_ROUTES
from tests.projections.conftest import RunProjection

MODEL = "fake:model-a"


@dataclass
class Log:
    """Appends to aggregates, remembering each one's position."""

    bus: Bus
    tenant: str
    positions: dict[tuple[str, str], Position] = field(default_factory=dict)

    async def add(
        self,
        aggregate: Aggregate,
        aggregate_id: str,
        *events: AnyEvent,
        agency: str | None = None,
        correlation: str | None = None,
    ) -> None:
        key = (aggregate, aggregate_id)
        result = await self.bus.store.append(
            self.tenant,
            aggregate,
            aggregate_id,
            list(events),
            expected=self.positions.get(key, Position()),
            context=EventContext(agency_id=agency, correlation_id=correlation),
        )
        self.positions[key] = result.position


@dataclass
class World:
    a: str
    b: str
    agency: str
    agency_b: str
    thread: str
    child: str
    rejected_thread: str
    thread_b: str
    key_hash: str
    key_id: str = field(default_factory=new_id)


async def start_all(run_projection: RunProjection) -> list[ProjectionRunner]:
    return [await run_projection(p) for p in ALL]


async def read_from_here(bus: Bus, pool: asyncpg.Pool) -> None:
    """Every read model of `pool` starts reading the log where it stands now: what the
    session's other tests wrote before is no part of a test's world, and reading it would
    only take time (more, the more the suite has written)."""
    start = await last_stream_seq(bus.js)
    async with pool.acquire() as conn:
        for projection in ALL:
            await conn.execute(
                f"INSERT INTO {CHECKPOINTS} (name, stream_seq) VALUES ($1, $2) "
                "ON CONFLICT (name) DO UPDATE SET stream_seq = EXCLUDED.stream_seq",
                projection.name,
                start,
            )


async def caught_up(runners: list[ProjectionRunner], bus: Bus, timeout: float = 30) -> None:
    last = await last_stream_seq(bus.js)
    for runner in runners:
        await runner.wait_until(last, timeout=timeout)


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


async def first_half(log: Log, w: World) -> None:
    """Registry, then a run up to a HITL pause."""
    await log.add("tenant", w.a, TenantCreated(name="Acme"))
    await log.add("tenant", w.a, ApiKeyIssued(key_id=w.key_id, key_hash=w.key_hash))
    await log.add(
        "tenant",
        w.a,
        ApiKeyIssued(key_id=w.key_id + "2", key_hash="h2"),
        ApiKeyRevoked(key_id=w.key_id + "2"),
    )
    await log.add("agency", w.agency, AgencyCreated(name="Support", metadata={"team": "a"}))
    await log.add(
        "agency",
        w.agency,
        BlueprintSaved(blueprint=BlueprintSpec(name="helper", prompt="v1"), revision=1),
        BlueprintSaved(blueprint=BlueprintSpec(name="gone", prompt="x"), revision=1),
    )
    await log.add(
        "agency",
        w.agency,
        BlueprintSaved(
            blueprint=BlueprintSpec(name="helper", prompt="v2", tags=("t",)), revision=2
        ),
        BlueprintDeleted(name="gone"),
    )
    t, ctx = w.thread, {"agency": w.agency, "correlation": w.thread}
    await log.add("thread", t, ThreadCreated(agency_id=w.agency, agent_type="helper"), **ctx)
    await log.add(
        "thread",
        t,
        RequestAccepted(run_id="r1", idempotency_key="key-1", messages=(user("hi"),)),
        **ctx,
    )
    await log.add(
        "thread",
        t,
        RunStarted(run_id="r1", agent_type="helper", max_steps=10),
        AgentStarted(run_id="r1", agent_type="helper", model=MODEL),
        MessageAppended(run_id="r1", message=user("hi")),
        RunTick(run_id="r1", step=1),
        ModelDelta(run_id="r1", step=1, delta="thinking"),
        **ctx,
    )
    calls = (
        ToolCall(id="c1", name="lookup", arguments='{"q": "x"}'),
        ToolCall(id="c2", name="write_file", arguments="not json"),
    )
    await log.add(
        "thread",
        t,
        ModelCompleted(
            run_id="r1",
            step=1,
            model=MODEL,
            message=ChatMessage(role="assistant", tool_calls=calls),
            usage=Usage(input_tokens=100, output_tokens=20),
            cost_usd=0.1,
        ),
        MessageAppended(run_id="r1", message=ChatMessage(role="assistant", tool_calls=calls)),
        ToolRequested(run_id="r1", step=1, call=calls[0]),
        **ctx,
    )
    await log.add(
        "thread",
        t,
        ToolOutput(run_id="r1", tool_call_id="c1", tool_name="lookup", output="42"),
        MessageAppended(
            run_id="r1", message=ChatMessage(role="tool", content="42", tool_call_id="c1")
        ),
        TodosWritten(run_id="r1", todos=(Todo(content="a"), Todo(content="b"))),
        FileWritten(run_id="r1", path="notes.md", content="v1"),
        **ctx,
    )
    await log.add(
        "thread",
        t,
        FileWritten(run_id="r1", path="notes.md", content="v2"),
        FileWritten(run_id="r1", path="other.md", content="x"),
        HitlInterrupt(run_id="r1", proposed_tool_calls=(calls[1],)),
        RunPaused(run_id="r1", reason="hitl"),
        # Every projection takes the runtime's checkpoints (threads: its last seq).
        CheckpointSaved(state_hash="sha256:00", size=2, upto_seq=17),
        **ctx,
    )


async def second_half(log: Log, w: World) -> None:
    """The run resumes and completes; a child, a rejected request, a handoff, tenant B."""
    t, ctx = w.thread, {"agency": w.agency, "correlation": w.thread}
    for event in (
        HitlResume(run_id="r1", approved=True),
        RunResumed(run_id="r1"),
        TodosWritten(run_id="r1", todos=(Todo(content="c", status="completed"),)),
        RunTick(run_id="r1", step=2),
        SubagentSpawned(
            run_id="r1", tool_call_id="c9", child_thread_id=w.child, token="tok", subagent_type="r"
        ),
    ):
        await log.add("thread", t, event, **ctx)  # one at a time: small projection batches
    parent = ParentRef(thread_id=t, token="tok", tool_call_id="c9")
    await log.add(
        "thread", w.child, ThreadCreated(agency_id=w.agency, agent_type="r", parent=parent), **ctx
    )
    await log.add(
        "thread",
        t,
        SubagentCompleted(
            run_id="r1",
            tool_call_id="c9",
            child_thread_id=w.child,
            outcome="completed",
            report="found",
        ),
        ModelCompleted(
            run_id="r1",
            step=2,
            model=MODEL,
            message=ChatMessage(role="assistant", content="done"),
            usage=Usage(input_tokens=50, output_tokens=10),
            cost_usd=0.2,
        ),
        MessageAppended(run_id="r1", message=ChatMessage(role="assistant", content="done")),
        ToolRegistered(run_id="r1", middleware="m", name="extra", kind="state"),
        RunCompleted(run_id="r1", result="done"),
        CheckpointSaved(state_hash="sha256:01", size=2, upto_seq=29),
        **ctx,
    )
    r, rctx = w.rejected_thread, {"agency": w.agency, "correlation": w.rejected_thread}
    await log.add(
        "thread",
        r,
        ThreadCreated(agency_id=w.agency, agent_type="helper"),
        RequestRejected(run_id="r9", idempotency_key="k9", reason="busy"),
        BlueprintSwitched(from_agent_type="helper", to_agent_type="expert"),
        ModelCompleted(
            run_id="r9",
            step=1,
            model="fake:model-b",
            message=user("x"),
            usage=Usage(input_tokens=7),
        ),
        **rctx,
    )
    b = Log(log.bus, w.b)
    await b.add("tenant", w.b, TenantCreated(name="Other"))
    await b.add("agency", w.agency_b, AgencyCreated(name="B"))
    bctx = {"agency": w.agency_b, "correlation": w.thread_b}
    await b.add(
        "thread", w.thread_b, ThreadCreated(agency_id=w.agency_b, agent_type="helper"), **bctx
    )
    await b.add(
        "thread",
        w.thread_b,
        RequestAccepted(run_id="rb", idempotency_key="kb"),
        RunStarted(run_id="rb", agent_type="helper", max_steps=3),
        ModelCompleted(
            run_id="rb", step=1, model=MODEL, message=user("b"), usage=Usage(output_tokens=5)
        ),
        FileWritten(path="notes.md", content="B's"),
        **bctx,
    )


@pytest.fixture
def world(tenant: str) -> World:
    return World(
        a=tenant,
        b=tenant + "b",
        agency="ag1",
        agency_b="ag2",
        thread=new_id(),
        child=new_id(),
        rejected_thread=new_id(),
        thread_b=new_id(),
        key_hash=hashlib.sha256(b"k1.secret").hexdigest(),
    )


@dataclass
class Built:
    runners: list[ProjectionRunner]
    log: Log

    async def finish(self, world: World) -> None:
        """Write the second half while the projections run, and wait for them."""
        await second_half(self.log, world)
        await caught_up(self.runners, self.log.bus)


async def _built(
    bus: Bus, world: World, run_projection: RunProjection, pool: asyncpg.Pool, *, whole: bool
) -> Built:
    """Every projection live over the first half. Each reads from where the log stood
    before the world was written (what the session's other tests wrote is no part of this
    world, and reading it would only take time), or, `whole`, from its start."""
    if not whole:
        await read_from_here(bus, pool)
    log = Log(bus, world.a)
    await first_half(log, world)
    runners = await start_all(run_projection)
    await caught_up(runners, bus, timeout=120 if whole else 30)
    return Built(runners, log)


@pytest.fixture
async def built(bus: Bus, world: World, run_projection: RunProjection, pool: asyncpg.Pool) -> Built:
    """Every projection live over the first half; tests add the second while they run."""
    return await _built(bus, world, run_projection, pool, whole=False)


@pytest.fixture
async def built_whole(
    bus: Bus, world: World, run_projection: RunProjection, pool: asyncpg.Pool
) -> Built:
    """As `built`, each projection having read the whole log, as a rebuild does."""
    return await _built(bus, world, run_projection, pool, whole=True)


async def test_a_restored_state_replaces_the_threads_messages_files_and_todos(
    world: World, pool: asyncpg.Pool, built: Built
) -> None:
    """A thread set back to a past checkpoint shows that checkpoint's state, then what came
    after it, whatever the batches the events come in."""
    restored = StateRestored(
        from_seq=2,
        messages=(user("kept"), ChatMessage(role="assistant", content="kept too")),
        files={"kept.md": "k"},
        todos=(Todo(content="again", status="pending"),),
    )
    await built.log.add(
        "thread",
        world.thread,
        FileWritten(path="lost.md", content="written before the restore"),
        restored,
        MessageAppended(message=user("after")),
        FileWritten(path="after.md", content="a"),
        agency=world.agency,
    )
    await caught_up(built.runners, built.log.bus)
    async with pool.acquire() as conn:
        view = await state_queries.thread_state(conn, world.a, world.agency, world.thread)
    assert view is not None
    assert [m.content for m in view.state.messages] == ["kept", "kept too", "after"]
    assert view.state.files == {"kept.md": "k", "after.md": "a"}
    assert view.state.todos == [state_queries.TodoView(content="again", status="pending")]


async def test_paused_run_shows_pending_calls_and_paused_status(
    bus: Bus, world: World, pool: asyncpg.Pool, built: Built
) -> None:
    async with pool.acquire() as conn:
        view = await state_queries.thread_state(conn, world.a, world.agency, world.thread)
    assert view is not None
    assert view.run == state_queries.RunState(run_id="r1", status="paused", step=1, reason="hitl")
    assert [(c.id, c.name, c.args) for c in view.state.pending_tool_calls] == [
        ("c2", "write_file", "not json")
    ]
    assert [t.content for t in view.state.todos] == ["a", "b"]


async def test_read_models_follow_a_whole_run(
    bus: Bus, world: World, pool: asyncpg.Pool, built: Built
) -> None:
    await built.finish(world)
    a = world.a
    async with pool.acquire() as conn:
        assert await agency_queries.tenant_for_key(conn, world.key_id, world.key_hash) == a
        assert await agency_queries.tenant_for_key(conn, world.key_id, "wrong") is None
        # revoked
        assert await agency_queries.tenant_for_key(conn, world.key_id + "2", "h2") is None

        (agency,) = await agency_queries.list_agencies(conn, a)
        assert (agency.id, agency.name, agency.metadata) == ("ag1", "Support", {"team": "a"})
        (helper,) = await agency_queries.list_blueprints(conn, a, world.agency)
        assert (helper.spec.prompt, helper.revision) == ("v2", 2)

        threads = {t.id: t for t in await queries.list_threads(conn, a, world.agency)}
        main, child, rejected = (
            threads[world.thread],
            threads[world.child],
            threads[world.rejected_thread],
        )
        assert (main.status, main.current_run_id, main.run_count, main.message_count) == (
            "completed",
            "r1",
            1,
            4,
        )
        assert main.last_seq == 30 and main.model == MODEL
        assert child.parent == queries.ParentInfo(
            thread_id=world.thread, token="tok", tool_call_id="c9"
        )
        assert child.correlation_id == world.thread
        assert (rejected.status, rejected.agent_type) == ("error", "expert")

        run = await queries.get_run(conn, a, world.thread, "r1")
        assert run is not None
        assert (run.status, run.step, run.input_tokens, run.output_tokens) == (
            "completed",
            2,
            150,
            30,
        )
        assert run.cost_usd == pytest.approx(0.3) and run.model == MODEL
        assert run.result == "done" and run.idempotency_key == "key-1"
        assert run.started_at is not None and run.ended_at is not None

        view = await state_queries.thread_state(conn, a, world.agency, world.thread)
        assert view is not None
        state = view.state
        assert view.run == state_queries.RunState(run_id="r1", status="completed", step=2)
        assert [m.role for m in state.messages] == ["user", "assistant", "tool", "assistant"]
        assert state.messages[1].tool_calls == [
            state_queries.ToolCallView(id="c1", name="lookup", args={"q": "x"}),
            state_queries.ToolCallView(id="c2", name="write_file", args="not json"),
        ]
        assert state.files == {"notes.md": "v2", "other.md": "x"}
        assert state.todos == [state_queries.TodoView(content="c", status="completed")]
        assert state.pending_tool_calls == []
        (link,) = state.subagents
        assert (link.child_thread_id, link.status, link.report, link.tool_call_id) == (
            world.child,
            "completed",
            "found",
            "c9",
        )
        assert link.completed_at is not None and link.completed_at >= link.created_at

        wire = msgspec.json.decode(msgspec.json.encode(view))
        assert set(wire) == {"state", "run"}
        assert wire["run"] == {"runId": "r1", "status": "completed", "step": 2, "reason": None}
        assert wire["state"]["messages"][2] == {"role": "tool", "content": "42", "toolCallId": "c1"}
        assert {"pendingToolCalls", "agentType", "threadId", "subagents"} <= set(wire["state"])
        assert wire["state"]["thread"]["agencyId"] == "ag1"

        usage = await queries.usage(conn, a, "blueprint")
        assert [(u.blueprint, u.calls, u.input_tokens, u.output_tokens) for u in usage] == [
            ("expert", 1, 7, 0),
            ("helper", 2, 150, 30),
        ]
        (total,) = await queries.usage(conn, a, "tenant")
        assert (total.calls, total.agency_id) == (3, None)
        assert total.cost_usd == pytest.approx(0.3)
        models = await queries.usage(conn, a, "model")
        assert [(u.model, u.calls) for u in models] == [("fake:model-a", 2), ("fake:model-b", 1)]


async def _events_page(
    conn: asyncpg.Connection, *args: Any, **kwargs: Any
) -> tuple[list[dict[str, Any]], bool]:
    """`event_rows` decoded: each envelope a dict with its `stream_seq` added."""
    rows, more = await queries.event_rows(conn, *args, **kwargs)
    return [msgspec.json.decode(raw) | {"stream_seq": seq} for raw, seq in rows], more


async def test_event_rows_filter_and_page(
    bus: Bus, world: World, pool: asyncpg.Pool, built: Built
) -> None:
    await built.finish(world)
    async with pool.acquire() as conn:
        page, more = await _events_page(conn, world.a, world.thread, 1, 5)
        assert [e["seq"] for e in page] == [1, 2, 3, 4, 5] and more
        assert page[0]["type"] == "thread.created" and page[0]["payload"]["agency_id"] == "ag1"
        rest, more = await _events_page(conn, world.a, world.thread, 6, 1000)
        assert [e["seq"] for e in rest] == list(range(6, 31)) and not more
        ticks, _ = await _events_page(
            conn, world.a, world.thread, 1, 100, ["run.tick", "run.completed"]
        )
        assert [e["type"] for e in ticks] == ["run.tick", "run.tick", "run.completed"]
        tree, _ = await _events_page(
            conn, world.a, world.thread, 1, 100, correlation_id=world.thread
        )
        assert {e["aggregate_id"] for e in tree} == {world.thread, world.child}
        assert [e["stream_seq"] for e in tree] == sorted(e["stream_seq"] for e in tree)


async def test_a_tenant_sees_nothing_of_another(
    bus: Bus, world: World, pool: asyncpg.Pool, built: Built
) -> None:
    await built.finish(world)
    b = world.b
    async with pool.acquire() as conn:
        assert [x.id for x in await agency_queries.list_agencies(conn, b)] == ["ag2"]
        assert await agency_queries.get_agency(conn, b, world.agency) is None
        assert await agency_queries.list_blueprints(conn, b, world.agency) == []
        assert await queries.list_threads(conn, b, world.agency) == []
        assert await queries.get_thread(conn, b, world.agency, world.thread) is None
        assert await queries.get_thread(conn, b, world.agency_b, world.thread) is None
        assert await state_queries.thread_state(conn, b, world.agency, world.thread) is None
        assert await queries.get_run(conn, b, world.thread, "r1") is None
        assert await queries.event_rows(conn, b, world.thread, 1, 100) == ([], False)
        assert await agency_queries.tenant_for_key(conn, world.key_id, world.key_hash) == world.a
        (usage,) = await queries.usage(conn, b, "agency")
        assert (usage.agency_id, usage.calls, usage.output_tokens) == ("ag2", 1, 5)
        own = await state_queries.thread_state(conn, b, world.agency_b, world.thread_b)
        assert own is not None and own.state.files == {"notes.md": "B's"}
        assert own.run.status == "running" and own.state.messages == []


async def test_rebuild_gives_the_same_rows_for_every_read_model(
    bus: Bus, world: World, pool: asyncpg.Pool, built_whole: Built
) -> None:
    """Live rows, built in uneven batches, equal a rebuild from sequence 1 in large ones."""
    await built_whole.finish(world)
    for projection in ALL[1:]:
        async with pool.acquire() as conn:
            before = await projection_checksum(conn, projection)
        await rebuild(pool, bus.js, projection)
        async with pool.acquire() as conn:
            after = await projection_checksum(conn, projection)
        assert before == after, projection.name


# --- the routes, through litestar -------------------------------------------------------


@pytest.fixture
async def client(pool: asyncpg.Pool, bus: Bus) -> AsyncIterator[httpx.AsyncClient]:
    system = AgentSystem(default_model=MODEL).add_tool(
        define_tool(lambda args, ctx: "ok", name="lookup", description="Look up."), ["t"]
    )
    system.add_agent(BlueprintSpec(name="helper", prompt="static"))
    system.add_agent(BlueprintSpec(name="static-only"))
    deps = ApiDeps(pool=pool, bus=bus, system=system, settings=ApiSettings())
    async with pool.acquire() as conn:
        for projection in ALL:  # as the app does at start, before the projector has run
            await ensure_tables(conn, projection, LIVE_SCHEMA)

    async def principal(request: Request[Any, Any, Any]) -> Principal:
        return Principal(tenant_id=request.headers["x-tenant"])

    async def api_deps() -> ApiDeps:
        return deps

    app = Litestar(
        route_handlers=QUERY_ROUTES,
        dependencies={"principal": Provide(principal), "deps": Provide(api_deps)},
    )
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # litestar types its ASGI scope narrower
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        yield http


async def test_routes_answer_from_the_read_models(
    bus: Bus,
    world: World,
    built: Built,
    client: httpx.AsyncClient,
) -> None:
    await built.finish(world)
    a, b = {"x-tenant": world.a}, {"x-tenant": world.b}
    base = f"/agency/{world.agency}"

    agencies = (await client.get("/agencies", headers=a)).json()
    assert [x["id"] for x in agencies] == ["ag1"]

    blueprints = (await client.get(f"{base}/blueprints", headers=a)).json()
    assert [(x["name"], x["source"], x["prompt"]) for x in blueprints] == [
        ("helper", "dynamic", "v2"),
        ("static-only", "static", ""),
    ]
    assert (await client.get(f"{base}/blueprints", headers=b)).status_code == 404

    agents = (await client.get(f"{base}/agents", headers=a)).json()
    assert len(agents) == 3 and {x["agencyId"] for x in agents} == {"ag1"}

    state = (await client.get(f"{base}/agent/{world.thread}/state", headers=a)).json()
    assert state["run"] == {"runId": "r1", "status": "completed", "step": 2, "reason": None}
    # The dynamic blueprint carries tag "t", which selects the `lookup` tool.
    assert [t["name"] for t in state["state"]["tools"]] == ["lookup"]
    assert state["state"]["files"] == {"notes.md": "v2", "other.md": "x"}
    assert (await client.get(f"{base}/agent/{world.thread}/state", headers=b)).status_code == 404

    events = (
        await client.get(
            f"{base}/agent/{world.thread}/events", params={"fromSeq": 3, "limit": 2}, headers=a
        )
    ).json()
    assert [e["seq"] for e in events["events"]] == [3, 4] and events["hasMore"] is True
    typed = await client.get(
        f"{base}/agent/{world.thread}/events?type=run.tick&type=run.completed", headers=a
    )
    assert [e["type"] for e in typed.json()["events"]] == ["run.tick", "run.tick", "run.completed"]

    usage = (await client.get("/usage", params={"groupBy": "model"}, headers=a)).json()
    assert [(u["model"], u["calls"]) for u in usage["rows"]] == [
        ("fake:model-a", 2),
        ("fake:model-b", 1),
    ]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/agency/ag1/agent/T/events?fromSeq=x", "fromSeq must be an integer from 0"),
        ("/agency/ag1/agent/T/events?fromSeq=-1", "fromSeq must be an integer from 0"),
        ("/agency/ag1/agent/T/events?limit=1001", "limit must be an integer from 1 to 1000"),
        ("/agency/ag1/agent/T/events?type=nope", "unknown event type"),
        ("/agency/a*b/agents", "invalid agency id"),
        ("/agency/ag1/agent/a%20b/state", "invalid thread id"),
        ("/usage?groupBy=planet", "groupBy"),
    ],
    ids=[
        "non-integer",
        "below-range",
        "above-range",
        "unknown-type",
        "bad-agency",
        "bad-thread",
        "bad-group",
    ],
)
async def test_bad_query_input_is_a_400_with_a_message(
    client: httpx.AsyncClient, path: str, message: str
) -> None:
    response = await client.get(path, headers={"x-tenant": "t1"})
    assert response.status_code == 400
    assert message in response.json()["detail"]


async def test_query_routes_are_described_in_openapi(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    assert "/agency/{agencyId}/agent/{threadId}/events" in schema["paths"]


async def test_unknown_thread_is_a_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/agency/ag1/agent/nope/state", headers={"x-tenant": "t1"})
    assert response.status_code == 404
    assert "nope" in response.json()["detail"]
