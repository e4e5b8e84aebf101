"""Prometheus metrics of the whole system, served by the API at `/metrics`.

Two sources, neither inside the services' hot paths:

- Latencies are observed from the log: each API process follows (plain NATS) the events
  that open and close a step, a model call or a tool call, and observes the time between
  their timestamps. A model call's latency is `model.started` → `model.completed`, a tool
  call's `tool.started` → its `tool.output` / `tool.error`, a step's one `run.tick` to the
  next (or to the run's end). The services stay free of metrics code, and whatever process
  ran the step, the numbers are the same.
- Totals are read at scrape time from where they are exact: runs by status and tokens and
  cost by tenant from the read models, consumer lag and dead letters from JetStream,
  projection lag from the checkpoints.
- The API process's own outage waits (`infra/outage.py`) follow; each other service serves
  its own with `agency serve --metrics-port`.

Each app has its own registry, so several apps in one process never collide.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Coroutine
from datetime import datetime
from typing import Any

import asyncpg
import structlog
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import Error as JetStreamError
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from agency.contracts.codec import readable_event
from agency.contracts.events import (
    ModelCompleted,
    ModelStarted,
    RunCanceled,
    RunCompleted,
    RunError,
    RunTick,
    ToolError,
    ToolOutput,
    ToolStarted,
)
from agency.contracts.subjects import DEAD_LETTER_STREAM
from agency.infra import outage
from agency.infra.jetstream.live import thread_events_live
from agency.infra.jetstream.partitions import discover_layout
from agency.projections.catalog import ALL
from agency.projections.status import projection_statuses

log = structlog.get_logger(__name__)

WATCHED = (
    "run.tick",
    "run.completed",
    "run.error",
    "run.canceled",
    "model.started",
    "model.completed",
    "tool.started",
    "tool.output",
    "tool.error",
)
# Calls begun but not yet seen to end; the oldest are forgotten past this many.
_OPEN_LIMIT = 50_000
_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, float("inf"))
_SCRAPE_TIMEOUT = 5.0


class _Open:
    """Start times of what has begun and not yet ended, bounded."""

    def __init__(self) -> None:
        self._starts: OrderedDict[tuple[str, ...], datetime] = OrderedDict()

    def begin(self, key: tuple[str, ...], ts: datetime) -> None:
        self._starts[key] = ts
        if len(self._starts) > _OPEN_LIMIT:
            self._starts.popitem(last=False)

    def end(self, key: tuple[str, ...], ts: datetime) -> float | None:
        started = self._starts.pop(key, None)
        return None if started is None else max((ts - started).total_seconds(), 0.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)

        def histogram(name: str, doc: str, *labels: str) -> Histogram:
            return Histogram(name, doc, labels, buckets=_BUCKETS, registry=self.registry)

        def gauge(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(name, doc, labels, registry=self.registry)

        self.step_seconds = histogram(
            "agency_step_seconds",
            "A run's step, run.tick to the next tick or the run's end.",
            "tenant",
        )
        self.model_seconds = histogram(
            "agency_model_call_seconds", "A model call, model.started to model.completed.", "model"
        )
        self.tool_seconds = histogram(
            "agency_tool_call_seconds",
            "A tool call, tool.started to its output or error.",
            "tool",
            "outcome",
        )
        self.runs = gauge(
            "agency_runs", "Runs by tenant and status (read model).", "tenant", "status"
        )
        self.tokens = gauge(
            "agency_tokens", "Model tokens by tenant (read model).", "tenant", "kind"
        )
        self.cost = gauge("agency_cost_usd", "Model cost in USD by tenant (read model).", "tenant")
        self.consumer_pending = gauge(
            "agency_consumer_pending",
            "Messages a durable consumer has not yet been given.",
            "stream",
            "consumer",
        )
        self.consumer_ack_pending = gauge(
            "agency_consumer_ack_pending",
            "Messages given to a durable consumer, not yet acked.",
            "stream",
            "consumer",
        )
        self.dead_letters = gauge(
            "agency_dead_letters",
            "Messages in the dead-letter stream by source and reason.",
            "stream",
            "reason",
        )
        self.projection_lag = gauge(
            "agency_projection_lag_events",
            "Events stored but not yet applied, by projection.",
            "projection",
        )
        self._steps = _Open()
        self._models = _Open()
        self._tools = _Open()

    # --- latencies, from the log ---------------------------------------------------------

    def observe(self, data: bytes) -> None:
        env = readable_event(data)
        if env is None:
            return
        run = (env.tenant_id, env.aggregate_id, getattr(env.payload, "run_id", ""))
        match env.payload:
            case RunTick():
                self._step_end(run, env.ts)
                self._steps.begin(run, env.ts)
            case RunCompleted() | RunError() | RunCanceled():
                self._step_end(run, env.ts)
            case ModelStarted(step=step):
                self._models.begin((*run, str(step)), env.ts)
            case ModelCompleted(step=step, model=model):
                if (seconds := self._models.end((*run, str(step)), env.ts)) is not None:
                    self.model_seconds.labels(model).observe(seconds)
            case ToolStarted(tool_call_id=call):
                self._tools.begin((*run, call), env.ts)
            case ToolOutput(tool_call_id=call, tool_name=tool):
                self._tool_end((*run, call), tool, "output", env.ts)
            case ToolError(tool_call_id=call, tool_name=tool):
                self._tool_end((*run, call), tool, "error", env.ts)

    def _step_end(self, run: tuple[str, str, str], ts: datetime) -> None:
        if (seconds := self._steps.end(run, ts)) is not None:
            self.step_seconds.labels(run[0]).observe(seconds)

    def _tool_end(self, key: tuple[str, ...], tool: str, outcome: str, ts: datetime) -> None:
        if (seconds := self._tools.end(key, ts)) is not None:
            self.tool_seconds.labels(tool, outcome).observe(seconds)

    def watching(self, nc: NATS) -> contextlib.AbstractAsyncContextManager[None]:
        """Observe latencies from the live log while the app runs."""
        return thread_events_live(nc, WATCHED, self.observe)

    # --- totals, at scrape time ----------------------------------------------------------

    async def render(self, pool: asyncpg.Pool, js: JetStreamContext) -> bytes:
        """Refresh the totals (each source bounded; one that fails keeps its last values)."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._bounded("read models", self._read_models(pool)))
            tg.create_task(self._bounded("consumers", self._consumers(js)))
            tg.create_task(self._bounded("dead letters", self._dead_letters(js)))
            tg.create_task(self._bounded("projections", self._projections(pool, js)))
        return generate_latest(self.registry) + generate_latest(outage.REGISTRY)

    async def _bounded(self, what: str, refresh: Coroutine[Any, Any, None]) -> None:
        try:
            async with asyncio.timeout(_SCRAPE_TIMEOUT):
                await refresh
        except (
            TimeoutError,
            OSError,
            NatsError,
            JetStreamError,
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
        ) as e:
            log.warning("metrics source failed", source=what, error=f"{type(e).__name__}: {e}")

    async def _read_models(self, pool: asyncpg.Pool) -> None:
        async with pool.acquire() as conn:
            runs = await conn.fetch(
                "SELECT tenant_id, status, count(*) AS n FROM runs GROUP BY tenant_id, status"
            )
            usage = await conn.fetch(
                "SELECT tenant_id, sum(input_tokens) AS i, sum(output_tokens) AS o, "
                "sum(cost_usd) AS c FROM usage_totals GROUP BY tenant_id"
            )
        self.runs.clear()
        for r in runs:
            self.runs.labels(r["tenant_id"], r["status"]).set(r["n"])
        for r in usage:
            self.tokens.labels(r["tenant_id"], "input").set(int(r["i"]))
            self.tokens.labels(r["tenant_id"], "output").set(int(r["o"]))
            self.cost.labels(r["tenant_id"]).set(float(r["c"]))

    async def _consumers(self, js: JetStreamContext) -> None:
        # Every events stream and every commands stream (one per partition of the log).
        layout = await discover_layout(js)
        for stream in (*layout.streams, *layout.command_streams):
            for info in await js.consumers_info(stream):
                if not info.config.durable_name:
                    continue  # ordered readers of one client come and go
                self.consumer_pending.labels(stream, info.name).set(info.num_pending or 0)
                self.consumer_ack_pending.labels(stream, info.name).set(info.num_ack_pending or 0)

    async def _dead_letters(self, js: JetStreamContext) -> None:
        info = await js.stream_info(DEAD_LETTER_STREAM, subjects_filter="dlq.>")
        self.dead_letters.clear()
        for subject, count in (info.state.subjects or {}).items():
            _, stream, reason = subject.split(".", 2)
            self.dead_letters.labels(stream, reason).set(count)

    async def _projections(self, pool: asyncpg.Pool, js: JetStreamContext) -> None:
        async with pool.acquire() as conn:
            statuses = await projection_statuses(conn, js, [p.name for p in ALL])
        for status in statuses:
            self.projection_lag.labels(status.name).set(status.lag)
