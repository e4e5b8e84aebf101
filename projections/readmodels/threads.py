"""Threads and their runs, folded with the runtime's semantics (`domain.thread_state`).

A batch is applied as load, fold, write: the rows of the threads and runs the batch
touches are read once, the events are folded over them in memory in stream order, and the
changed rows are written back with one executemany per table.

A thread's `status` is the status of its current run: the active one (started and not
ended, so running or paused) while there is one, else the latest registered; `idle` when
the thread has had no run. A run queued behind an active one therefore shows once the
active run ends. A terminated thread (`thread.terminated`) is `terminated` for good.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from decimal import Decimal

import asyncpg
import msgspec

from agency.contracts.envelope import Envelope
from agency.contracts.events import (
    AgentStarted,
    BlueprintSwitched,
    MessageAppended,
    ModelCompleted,
    RequestAccepted,
    RequestInjected,
    RequestRejected,
    RunCanceled,
    RunCompleted,
    RunError,
    RunPaused,
    RunResumed,
    RunStarted,
    RunTick,
    ThreadCreated,
    ThreadMetadataSet,
    ThreadRetentionSet,
    ThreadTerminated,
)
from agency.infra.jetstream.records import RecordedEvent
from agency.projections.projection import Projection
from agency.projections.statements import upsert

DDL = """
CREATE TABLE IF NOT EXISTS threads (
    tenant_id           text        NOT NULL,
    thread_id           text        NOT NULL,
    agency_id           text        NOT NULL,
    agent_type          text        NOT NULL,
    model               text        NOT NULL,
    parent_thread_id    text,
    parent_token        text,
    parent_tool_call_id text,
    correlation_id      text        NOT NULL,
    request             jsonb       NOT NULL,
    created_at          timestamptz NOT NULL,
    status              text        NOT NULL,
    current_run_id      text,
    active_run_id       text,
    latest_run_id       text,
    message_count       integer     NOT NULL,
    run_count           integer     NOT NULL,
    last_seq            bigint      NOT NULL,
    updated_at          timestamptz NOT NULL,
    retention_seconds   double precision,
    PRIMARY KEY (tenant_id, thread_id)
);
-- How long the thread is kept after its last activity (null: its agency's).
ALTER TABLE threads ADD COLUMN IF NOT EXISTS retention_seconds double precision;
CREATE INDEX IF NOT EXISTS threads_with_retention
    ON threads (tenant_id) WHERE retention_seconds IS NOT NULL;
CREATE INDEX IF NOT EXISTS threads_by_agency
    ON threads (tenant_id, agency_id, created_at, thread_id);
CREATE TABLE IF NOT EXISTS runs (
    tenant_id       text        NOT NULL,
    thread_id       text        NOT NULL,
    run_id          text        NOT NULL,
    ordinal         integer     NOT NULL,
    status          text        NOT NULL,
    reason          text,
    step            integer     NOT NULL,
    max_steps       integer     NOT NULL,
    idempotency_key text,
    agent_type      text        NOT NULL,
    model           text        NOT NULL,
    input_tokens    bigint      NOT NULL,
    output_tokens   bigint      NOT NULL,
    cost_usd        numeric     NOT NULL,
    result          text,
    error           text,
    created_at      timestamptz NOT NULL,
    started_at      timestamptz,
    ended_at        timestamptz,
    PRIMARY KEY (tenant_id, thread_id, run_id)
);
CREATE INDEX IF NOT EXISTS runs_by_thread ON runs (tenant_id, thread_id, ordinal);
"""

ACTIVE = frozenset({"running", "paused"})
TERMINATED = "terminated"


@dataclass(slots=True)
class ThreadRow:
    tenant_id: str
    thread_id: str
    agency_id: str
    agent_type: str
    parent_thread_id: str | None
    parent_token: str | None
    parent_tool_call_id: str | None
    correlation_id: str
    request: str
    created_at: datetime
    last_seq: int
    updated_at: datetime
    # What a new thread starts with: no run, no message, no model yet.
    model: str = ""
    status: str = "idle"
    current_run_id: str | None = None
    active_run_id: str | None = None
    latest_run_id: str | None = None
    message_count: int = 0
    run_count: int = 0
    retention_seconds: float | None = None


@dataclass(slots=True)
class RunRow:
    tenant_id: str
    thread_id: str
    run_id: str
    ordinal: int
    status: str
    reason: str | None
    step: int
    max_steps: int
    idempotency_key: str | None
    agent_type: str
    model: str
    input_tokens: int
    output_tokens: int
    # numeric, summed exactly: the same total however the events were batched.
    cost_usd: Decimal
    result: str | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None


THREAD_COLUMNS = tuple(f.name for f in fields(ThreadRow))
RUN_COLUMNS = tuple(f.name for f in fields(RunRow))
_UPSERT_THREAD = upsert("threads", THREAD_COLUMNS, ("tenant_id", "thread_id"))
_UPSERT_RUN = upsert("runs", RUN_COLUMNS, ("tenant_id", "thread_id", "run_id"))
_LOAD_THREADS = (
    f"SELECT {', '.join(THREAD_COLUMNS)} FROM threads WHERE (tenant_id, thread_id) IN "
    "(SELECT * FROM unnest($1::text[], $2::text[]))"
)
_LOAD_RUNS = (
    f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE (tenant_id, thread_id, run_id) IN "
    "(SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))"
)

ThreadKey = tuple[str, str]
RunKey = tuple[str, str, str]


class _Fold:
    """The rows a batch touches, and the fold of its events over them."""

    def __init__(self, threads: dict[ThreadKey, ThreadRow], runs: dict[RunKey, RunRow]) -> None:
        self.threads = threads
        self.runs = runs
        self.dirty_threads: set[ThreadKey] = set()
        self.dirty_runs: set[RunKey] = set()

    def apply(self, env: Envelope) -> None:
        key = (env.tenant_id, env.aggregate_id)
        payload = env.payload
        if isinstance(payload, ThreadCreated):
            self.threads[key] = _new_thread(env, payload)
        thread = self.threads.get(key)
        if thread is None:
            return  # not created (or not yet seen): nothing to attach the event to
        self.dirty_threads.add(key)
        thread.last_seq = env.seq
        thread.updated_at = env.ts
        self._apply_payload(thread, env)

    def _apply_payload(self, thread: ThreadRow, env: Envelope) -> None:
        run: RunRow | None
        match env.payload:
            case RequestAccepted(run_id=run_id, idempotency_key=key):
                self._register(thread, run_id, env).idempotency_key = key
            case RequestRejected(run_id=run_id, idempotency_key=key, reason=reason):
                run = self._register(thread, run_id, env)
                run.idempotency_key = key
                run.status, run.error, run.ended_at = "error", reason, env.ts
            case RequestInjected(run_id=host, request_run_id=request_run_id):
                # The request joined the active run: its answer is that run's.
                if run := self._run(thread, request_run_id):
                    run.status, run.reason, run.ended_at = "injected", host, env.ts
            case RunStarted(run_id=run_id, agent_type=agent_type, max_steps=max_steps):
                run = self._run(thread, run_id) or self._register(thread, run_id, env)
                run.status, run.agent_type, run.max_steps = "running", agent_type, max_steps
                run.started_at = run.started_at or env.ts
                thread.active_run_id = run_id
            case AgentStarted(run_id=run_id, model=model):
                thread.model = model
                if run := self._run(thread, run_id):
                    run.model = model
            case RunTick(run_id=run_id, step=step):
                if run := self._run(thread, run_id):
                    run.step = step
            case RunPaused(run_id=run_id, reason=reason):
                if run := self._run(thread, run_id):
                    run.status, run.reason = "paused", reason
            case RunResumed(run_id=run_id, max_steps=max_steps):
                if run := self._run(thread, run_id):
                    run.status, run.reason = "running", None
                    run.max_steps = max_steps or run.max_steps
            case RunCompleted(run_id=run_id, result=result):
                if run := self._finish(thread, run_id, "completed", env):
                    run.result = result
            case RunError(run_id=run_id, error=error, kind=kind):
                if run := self._finish(thread, run_id, "error", env):
                    run.error, run.reason = error, kind
            case RunCanceled(run_id=run_id, reason=reason):
                if run := self._finish(thread, run_id, "canceled", env):
                    run.reason = reason or "canceled"
            case ModelCompleted(run_id=run_id, model=model, usage=usage, cost_usd=cost):
                if run := self._run(thread, run_id):
                    run.input_tokens += usage.input_tokens
                    run.output_tokens += usage.output_tokens
                    run.cost_usd += Decimal(repr(cost))
                    run.model = run.model or model
            case MessageAppended():
                thread.message_count += 1
            case BlueprintSwitched(to_agent_type=agent_type):
                thread.agent_type = agent_type
            case ThreadTerminated():
                thread.status = TERMINATED
            case ThreadRetentionSet(seconds=seconds):
                thread.retention_seconds = seconds
            case ThreadMetadataSet(metadata=metadata):
                merged = {**msgspec.json.decode(thread.request), **metadata}
                thread.request = msgspec.json.encode(merged).decode()

    def _run(self, thread: ThreadRow, run_id: str) -> RunRow | None:
        key = (thread.tenant_id, thread.thread_id, run_id)
        run = self.runs.get(key)
        if run is not None:
            self.dirty_runs.add(key)
        return run

    def _register(self, thread: ThreadRow, run_id: str, env: Envelope) -> RunRow:
        """A new run, latest of its thread (a repeated id starts over, as in the runtime)."""
        thread.run_count += 1
        thread.latest_run_id = run_id
        key = (thread.tenant_id, thread.thread_id, run_id)
        run = RunRow(
            tenant_id=thread.tenant_id,
            thread_id=thread.thread_id,
            run_id=run_id,
            ordinal=thread.run_count,
            status="registered",
            reason=None,
            step=0,
            max_steps=0,
            idempotency_key=None,
            agent_type=thread.agent_type,
            model="",
            input_tokens=0,
            output_tokens=0,
            cost_usd=Decimal(0),
            result=None,
            error=None,
            created_at=env.ts,
            started_at=None,
            ended_at=None,
        )
        self.runs[key] = run
        self.dirty_runs.add(key)
        return run

    def _finish(self, thread: ThreadRow, run_id: str, status: str, env: Envelope) -> RunRow | None:
        run = self._run(thread, run_id)
        if run is None:
            return None
        run.status, run.ended_at = status, env.ts
        if thread.active_run_id == run_id:
            thread.active_run_id = None
        return run

    def settle(self) -> None:
        """Point each touched thread at its current run and take that run's status."""
        for key in self.dirty_threads:
            thread = self.threads[key]
            current = thread.active_run_id or thread.latest_run_id
            thread.current_run_id = current
            if thread.status == TERMINATED:
                continue  # for good: no run of it changes that
            if current is None:
                thread.status = "idle"
            elif run := self.runs.get((thread.tenant_id, thread.thread_id, current)):
                thread.status = run.status


def _new_thread(env: Envelope, created: ThreadCreated) -> ThreadRow:
    parent = created.parent
    return ThreadRow(
        tenant_id=env.tenant_id,
        thread_id=env.aggregate_id,
        correlation_id=env.correlation_id or env.aggregate_id,
        created_at=env.ts,
        last_seq=env.seq,
        updated_at=env.ts,
        agency_id=created.agency_id,
        agent_type=created.agent_type,
        request=msgspec.json.encode(created.request).decode(),
        parent_thread_id=parent.thread_id if parent else None,
        parent_token=parent.token if parent else None,
        parent_tool_call_id=parent.tool_call_id if parent else None,
    )


async def _load(conn: asyncpg.Connection, envelopes: Sequence[Envelope]) -> _Fold:
    thread_keys = sorted({(env.tenant_id, env.aggregate_id) for env in envelopes})
    records = await conn.fetch(
        _LOAD_THREADS, [k[0] for k in thread_keys], [k[1] for k in thread_keys]
    )
    threads = {(r["tenant_id"], r["thread_id"]): ThreadRow(**dict(r)) for r in records}
    run_keys: set[RunKey] = set()
    for env in envelopes:
        run_id = getattr(env.payload, "run_id", None)
        if isinstance(run_id, str):
            run_keys.add((env.tenant_id, env.aggregate_id, run_id))
    for t in threads.values():
        for run_id in (t.active_run_id, t.latest_run_id):
            if run_id is not None:
                run_keys.add((t.tenant_id, t.thread_id, run_id))
    wanted = sorted(run_keys)
    run_records = await conn.fetch(
        _LOAD_RUNS, [k[0] for k in wanted], [k[1] for k in wanted], [k[2] for k in wanted]
    )
    runs = {(r["tenant_id"], r["thread_id"], r["run_id"]): RunRow(**dict(r)) for r in run_records}
    return _Fold(threads, runs)


async def apply(conn: asyncpg.Connection, events: Sequence[RecordedEvent]) -> None:
    envelopes = [e.envelope for e in events if e.envelope.aggregate == "thread"]
    if not envelopes:
        return
    fold = await _load(conn, envelopes)
    for env in envelopes:
        fold.apply(env)
    fold.settle()
    threads = [fold.threads[k] for k in sorted(fold.dirty_threads)]
    runs = [fold.runs[k] for k in sorted(fold.dirty_runs)]
    if threads:
        await conn.executemany(
            _UPSERT_THREAD, [tuple(getattr(t, c) for c in THREAD_COLUMNS) for t in threads]
        )
    if runs:
        await conn.executemany(
            _UPSERT_RUN, [tuple(getattr(r, c) for c in RUN_COLUMNS) for r in runs]
        )


# Every event of a thread moves its `last_seq`, so the projection takes every event type.
PROJECTION = Projection(name="threads", tables=("threads", "runs"), ddl=DDL, apply=apply)
