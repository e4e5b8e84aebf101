"""Replay speed against the raw read rate of the same events, in one run.

The log: `--threads` threads of `--per-thread` events each (100,000 by default), shaped like
real runs (requests, steps, model calls, tool calls and results, messages), appended with
the event store in multi-event decisions by concurrent writers, so threads interleave in
the stream as they do live.

- ours: replaying the tenant's whole history as `agency replay` does, minus the terminal:
  read in stream order (the ordered-consumer reader every replay and rebuild uses), decode
  and check each event, fold it into its thread's `ThreadState` (the runtime's own fold) and
  format its timeline line (`domain.timeline`). Read + decode + fold + format.
- baseline: a raw nats-py ordered push consumer over the same subjects from the same first
  sequence, counting messages without touching their bytes.

Both sides run alternately, `ROUNDS` times each; the medians are reported. The embedded
server runs with `sync_interval: default` unless AGENCY_NATS_SYNC says otherwise: fsync
policy changes how fast the log is written, not how fast it is read.

Run: `just bench replay` (options: --threads N, --per-thread N).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics

import uvloop
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from agency.contracts.events import (
    AnyEvent,
    ChatMessage,
    MessageAppended,
    ModelCompleted,
    ModelStarted,
    RequestAccepted,
    RunCompleted,
    RunStarted,
    RunTick,
    ThreadCreated,
    ToolCall,
    ToolOutput,
    ToolRequested,
    ToolStarted,
    Usage,
)
from agency.contracts.ids import new_id
from agency.contracts.subjects import EVENTS_STREAM, tenant_events_filter
from agency.domain.thread_state import ThreadState
from agency.domain.timeline import Row, format_row
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.reader import OrderedReader
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent
from agency.infra.jetstream.streams import provision
from bench.common import Stopwatch, embedded_servers, report

ROUNDS = 3
DECISION = 25  # events per append: a few steps of a run
WRITERS = 32
READ_TIMEOUT = 60.0


def thread_history(thread: int, size: int) -> list[AnyEvent]:
    """`size` events shaped like a run: one request, then tool-calling steps."""
    run = f"run_{thread}"
    events: list[AnyEvent] = [
        ThreadCreated(agency_id="bench", agent_type="assistant"),
        RequestAccepted(
            run_id=run,
            idempotency_key=f"k{thread}",
            messages=(ChatMessage(role="user", content="please look these words up"),),
        ),
        RunStarted(run_id=run, agent_type="assistant", max_steps=100),
        MessageAppended(
            run_id=run, message=ChatMessage(role="user", content="please look these words up")
        ),
    ]
    step = 0
    while len(events) < size - 2:
        step += 1
        call = ToolCall(id=f"call_{thread}_{step}", name="lookup", arguments='{"word": "agent"}')
        said = ChatMessage(role="assistant", content=f"step {step}: looking up", tool_calls=(call,))
        events += [
            RunTick(run_id=run, step=step),
            ModelStarted(run_id=run, step=step, model="openai:gpt-4.1-mini", message_count=step),
            ModelCompleted(
                run_id=run,
                step=step,
                model="gpt-4.1-mini",
                message=said,
                usage=Usage(input_tokens=200, output_tokens=20),
            ),
            MessageAppended(run_id=run, message=said),
            ToolRequested(run_id=run, step=step, call=call),
            ToolStarted(run_id=run, tool_call_id=call.id, tool_name="lookup", arguments="{}"),
            ToolOutput(run_id=run, tool_call_id=call.id, tool_name="lookup", output="a word"),
            MessageAppended(
                run_id=run,
                message=ChatMessage(role="tool", content="a word", tool_call_id=call.id),
            ),
        ]
    events = events[: size - 1]
    events.append(RunCompleted(run_id=run, result="done"))
    return events


async def write_log(bus: Bus, tenant: str, threads: int, per_thread: int) -> int:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(threads):
        queue.put_nowait(i)

    async def writer() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            thread, position = new_id(), Position()
            history = thread_history(i, per_thread)
            context = EventContext(agency_id="bench", correlation_id=thread)
            for start in range(0, len(history), DECISION):
                result = await bus.store.append(
                    tenant,
                    "thread",
                    thread,
                    history[start : start + DECISION],
                    expected=position,
                    context=context,
                )
                position = result.position

    await asyncio.gather(*(writer() for _ in range(WRITERS)))
    return threads * per_thread


async def replay_tenant(bus: Bus, tenant: str, total: int) -> tuple[int, int]:
    """Read, decode, fold and format every event of the tenant; (events, characters)."""
    states: dict[str, ThreadState] = {}
    seen = 0
    chars = 0
    async with OrderedReader(bus.js, tenant_events_filter(tenant), batch=1000) as reader:
        while seen < total:
            delivered = await reader.next_batch(timeout=READ_TIMEOUT)
            if not delivered:
                raise TimeoutError(f"replay stalled at {seen} of {total} events")
            for item in delivered:
                seen += 1
                if not isinstance(item, RecordedEvent):
                    continue
                thread = item.envelope.aggregate_id
                state = states.get(thread) or ThreadState(tenant_id=tenant, thread_id=thread)
                state = state.apply(item)
                states[thread] = state
                run = state.active_run
                chars += len(format_row(Row(item, 0, run.step if run else None)))
    return seen, chars


async def raw_read(bus: Bus, tenant: str, total: int) -> int:
    """The ceiling: an ordered push consumer delivering the same messages, untouched."""
    done = asyncio.Event()
    count = 0

    async def on_message(msg: Msg) -> None:
        nonlocal count
        count += 1
        if count >= total:
            done.set()

    sub = await bus.js.subscribe(
        tenant_events_filter(tenant),
        stream=EVENTS_STREAM,
        cb=on_message,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    try:
        await asyncio.wait_for(done.wait(), timeout=READ_TIMEOUT * 5)
    finally:
        await asyncio.wait_for(sub.unsubscribe(), timeout=5)
    return count


async def main() -> None:
    parser = argparse.ArgumentParser(prog="just bench replay")
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--per-thread", type=int, default=100)
    args = parser.parse_args()
    os.environ.setdefault("AGENCY_NATS_SYNC", "default")
    async with embedded_servers() as servers, Bus(servers.nats_url, name="bench") as bus:
        await provision(bus.js)
        tenant = "replay" + new_id()[-8:].lower()
        clock = Stopwatch()
        total = await write_log(bus, tenant, args.threads, args.per_thread)
        print(
            f"replay benchmark: {total:,} events in {args.threads:,} threads written in "
            f"{clock.elapsed:.1f} s (nats sync_interval={servers.sync_interval})",
            flush=True,
        )
        ours: list[float] = []
        raw: list[float] = []
        for _ in range(ROUNDS):
            clock = Stopwatch()
            assert await raw_read(bus, tenant, total) >= total
            raw.append(total / clock.elapsed)
            clock = Stopwatch()
            seen, _ = await replay_tenant(bus, tenant, total)
            assert seen == total
            ours.append(total / clock.elapsed)
        report("replay", statistics.median(ours), statistics.median(raw))


if __name__ == "__main__":
    uvloop.run(main())
