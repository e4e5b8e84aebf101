"""What the log's layout costs the broker: the designs that the unmet targets would need.

Measurements on fresh embedded nats-servers started as `agency up` starts its own
(`sync_interval: always`, its `GOGC` and memory limit, the events stream as provisioned),
with envelopes of the sizes a run writes:

- `layout-parked`: the Go heap nats-server holds once `--threads` threads are stored (each
  the 14 events of a thread created, invoked and parked, in its three appends), beyond the
  empty server's, after `--rest` seconds at rest and two collections (its heap profile's
  `HeapAlloc`, served on a profiling port). "Ours": a message per event on the subject of
  its type (`…evt.thread.<id>.<type>`, the previous layout); baseline: every event of a
  thread on one subject (`…evt.thread.<id>`, the layout of `docs/nats.md` now). Each
  layout on a server of its own; ratio baseline/ours. PSS right after and after the
  rest is printed too.
- `layout-parked-decisions`: the same against a message per decision (one message
  holding an append's envelopes) on one subject a thread.
- `layout-decision`: p50 ms to store a decision of `--batch` events after the thread's
  expected sequence. Ours: an atomic batch of one message per event; baseline: one
  message holding the same envelopes. On one server, in turns of ten; ratio baseline/ours.

Nothing here is the system's code path: it isolates the broker's part of `parked`,
`resume` and `create` (`docs/performance.md`, "What the unmet targets would need").
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import nats
import psutil
from nats.aio.client import Client
from nats.aio.msg import Msg

from agency.contracts.events import ChatMessage, MessageAppended
from agency.contracts.ids import new_id
from agency.contracts.subjects import legacy_event_subject
from agency.infra.jetstream.envelopes import encode_checked, new_envelopes
from agency.infra.jetstream.ports import Append
from agency.infra.jetstream.records import Position
from agency.infra.jetstream.streams import StreamSettings, event_stream
from agency.infra.launch import NatsServer
from agency.infra.launch.process import free_port
from agency.infra.settings import InfraSettings
from agency.services.observability.logging import configure_logging
from bench.common import print_load

TENANT = "bench"
# The event types of a thread created, invoked and parked on an approval, in order.
PARKED_TYPES = (
    "thread.created",
    "request.accepted",
    "run.started",
    "agent.started",
    "run.tick",
    "middleware.before_model",
    "model.started",
    "model.completed",
    "middleware.after_model",
    "message.appended",
    "hitl.interrupt",
    "run.paused",
    "checkpoint.saved",
    "message.appended",
)


@dataclass(frozen=True, slots=True)
class Held:
    live_mb: float  # the Go heap that a collection leaves, beyond the empty server's
    loaded_mb: float  # PSS beyond the empty server's, once stored
    rested_mb: float  # the same after the rest
    subjects: int
    messages: int


def bodies(count: int) -> list[bytes]:
    """`count` envelopes as the store encodes them, about the size of a run's events."""
    text = "the model says something short enough to be one of a run's ordinary events"
    payloads = [
        MessageAppended(run_id="run-1", message=ChatMessage(role="assistant", content=text))
        for _ in range(count)
    ]
    envelopes = new_envelopes(Append(TENANT, "thread", new_id(), payloads, Position()))
    return encode_checked(envelopes)


class Layout(enum.Enum):
    """How a thread's events are laid out on the broker."""

    TYPED = "a message per event, a subject per event type"
    THREAD = "a message per event, a subject per thread"
    DECISION = "a message per decision, a subject per thread"


# The appends of a thread created, invoked and parked: its creation, the run's opening
# (the acceptance to the model call), and the model's answer to the pause.
PARKED_APPENDS = (1, 6, 7)


def thread_subject(thread: str) -> str:
    return f"tenant.{TENANT}.evt.thread.{thread}"


def family_of(subject: str) -> str | None:
    """The thread's subjects, for the expected sequence, where its events have a type
    token; None where the event's subject is the thread's own."""
    thread = subject.split(".")[4]
    return None if subject == thread_subject(thread) else f"{thread_subject(thread)}.>"


def subjects_of(thread: str, types: Sequence[str], layout: Layout) -> list[str]:
    if layout is Layout.TYPED:
        return [legacy_event_subject(TENANT, "thread", thread, t) for t in types]
    return [thread_subject(thread)] * len(types)


async def store_batch(
    nc: Client, subjects: Sequence[str], payloads: Sequence[bytes], expected: int = 0
) -> int:
    """One atomic batch, the thread's expected sequence on its first message; the stream
    sequence of its last message."""
    batch_id = new_id()
    family = family_of(subjects[0])
    for i, (subject, body) in enumerate(zip(subjects, payloads, strict=True), start=1):
        headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i)}
        if i == 1:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expected)
            if family is not None:
                headers["Nats-Expected-Last-Subject-Sequence-Subject"] = family
        if i < len(subjects):
            await nc.publish(subject, body, headers=headers)
            continue
        headers["Nats-Batch-Commit"] = "1"
        return stored_seq(await nc.request(subject, body, headers=headers, timeout=10))
    raise ValueError("an empty batch")


async def store_one(nc: Client, subject: str, body: bytes, expected: int = 0) -> int:
    """One message after the subject's expected sequence; its stream sequence."""
    headers = {"Nats-Expected-Last-Subject-Sequence": str(expected)}
    return stored_seq(await nc.request(subject, body, headers=headers, timeout=10))


def stored_seq(reply: Msg) -> int:
    answer = json.loads(reply.data)
    if "error" in answer:
        raise RuntimeError(f"append refused: {answer['error']}")
    return int(answer["seq"])


async def store_thread(nc: Client, payloads: Sequence[bytes], layout: Layout) -> None:
    """A parked thread's events, in its appends, laid out as `layout` says."""
    thread = new_id()
    subjects = subjects_of(thread, PARKED_TYPES, layout)
    expected, at = 0, 0
    for size in PARKED_APPENDS:
        part = slice(at, at + size)
        if layout is Layout.DECISION:
            expected = await store_one(nc, subjects[at], b"\n".join(payloads[part]), expected)
        elif size == 1:
            headers = {"Nats-Expected-Last-Subject-Sequence": str(expected)}
            if (family := family_of(subjects[at])) is not None:
                headers["Nats-Expected-Last-Subject-Sequence-Subject"] = family
            expected = stored_seq(
                await nc.request(subjects[at], payloads[at], headers=headers, timeout=10)
            )
        else:
            expected = await store_batch(nc, subjects[part], payloads[part], expected)
        at += size


def pss_mb(pid: int) -> float:
    info = psutil.Process(pid).memory_full_info()
    return float(getattr(info, "pss", info.rss)) / 2**20


def server(root: Path, profile_port: int | None = None) -> NatsServer:
    settings = InfraSettings.from_env()
    return NatsServer(
        root,
        sync_interval="always",
        memory_limit=settings.nats_memory_limit,
        gc_percent=settings.nats_gc_percent,
        profile_port=profile_port,
    )


async def live_heap_mb(profile_port: int) -> float:
    """The server's Go heap in use right after collections (`HeapAlloc` of its heap
    profile taken with `gc=1`): what it holds, whatever its collector left lying about."""
    url = f"http://127.0.0.1:{profile_port}/debug/pprof/heap?debug=1&gc=1"
    async with httpx.AsyncClient(timeout=30) as client:
        # Twice: a collection moves pooled buffers aside, the next one frees them.
        for _ in range(2):
            text = (await client.get(url)).raise_for_status().text
    found = re.search(r"^# HeapAlloc = (\d+)$", text, re.MULTILINE)
    if found is None:
        raise RuntimeError("nats-server's heap profile has no HeapAlloc")
    return int(found.group(1)) / 2**20


async def parked(threads: int, writers: int, rest: float, layout: Layout) -> Held:
    """nats-server's memory beyond its empty self once `threads` threads are stored."""
    payloads = bodies(len(PARKED_TYPES))
    profile_port = free_port()
    with tempfile.TemporaryDirectory(prefix="agency-layout-") as tmp:
        async with server(Path(tmp), profile_port) as nats_server:
            assert nats_server.pid is not None
            nc = await nats.connect(nats_server.url)
            try:
                js = nc.jetstream()
                await js.add_stream(event_stream(StreamSettings()))
                empty, empty_heap = pss_mb(nats_server.pid), await live_heap_mb(profile_port)
                queue = iter(range(threads))

                async def writer() -> None:
                    for _ in queue:
                        await store_thread(nc, payloads, layout)

                await asyncio.gather(*(writer() for _ in range(writers)))
                loaded = pss_mb(nats_server.pid) - empty
                await asyncio.sleep(rest)  # the measurement itself: memory after a rest
                rested = pss_mb(nats_server.pid) - empty
                live = await live_heap_mb(profile_port) - empty_heap
                name = event_stream(StreamSettings()).name
                reply = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=10)
                state = json.loads(reply.data)["state"]
            finally:
                await nc.close()
    subjects, messages = int(state.get("num_subjects", 0)), int(state["messages"])
    return Held(live, loaded, rested, subjects, messages)


async def decisions(batch: int, samples: int) -> tuple[float, float]:
    """p50 ms of a decision stored as a batch of messages and as one message, in turns."""
    payloads = bodies(batch)
    joined = b"\n".join(payloads)
    types = [PARKED_TYPES[i % len(PARKED_TYPES)] for i in range(batch)]
    as_batch: list[float] = []
    as_one: list[float] = []
    with tempfile.TemporaryDirectory(prefix="agency-layout-") as tmp:
        async with server(Path(tmp)) as nats_server:
            nc = await nats.connect(nats_server.url)
            try:
                await nc.jetstream().add_stream(event_stream(StreamSettings()))
                warm = 20
                for turn in range((samples + warm) // 10 + 1):
                    for _ in range(10):
                        started = time.perf_counter()
                        await store_batch(nc, subjects_of(new_id(), types, Layout.TYPED), payloads)
                        if turn * 10 >= warm:
                            as_batch.append((time.perf_counter() - started) * 1000)
                    for _ in range(10):
                        started = time.perf_counter()
                        await store_one(nc, thread_subject(new_id()), joined)
                        if turn * 10 >= warm:
                            as_one.append((time.perf_counter() - started) * 1000)
            finally:
                await nc.close()
    return statistics.median(as_batch[:samples]), statistics.median(as_one[:samples])


def line(metric: str, ours: float, baseline: float) -> None:
    ratio = baseline / ours if ours else 0.0
    print(f"bench: {metric} ours={ours:.2f} baseline={baseline:.2f} ratio={ratio:.3f}", flush=True)


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.layouts", description=__doc__)
    parser.add_argument("--threads", type=int, default=10_000, help="threads stored (10,000)")
    parser.add_argument("--writers", type=int, default=16, help="concurrent writers (16)")
    parser.add_argument("--rest", type=float, default=30.0, help="seconds at rest (30)")
    parser.add_argument("--batch", type=int, default=15, help="events in a decision (15)")
    parser.add_argument("--samples", type=int, default=200, help="decisions of each kind (200)")
    args = parser.parse_args(argv)
    configure_logging("json", level=40)
    print(f"layouts: {args.threads:,} threads of {len(PARKED_TYPES)} events by {args.writers} "
          f"writers; decisions of {args.batch} events, {args.samples} of each kind. Nothing "
          "else should run on the machine.", flush=True)  # fmt: skip
    print_load("before")
    held: dict[Layout, Held] = {}
    for layout in Layout:
        held[layout] = found = await parked(args.threads, args.writers, args.rest, layout)
        print(f"  {layout.value}: {found.messages:,} messages on {found.subjects:,} "
              f"subjects; nats-server +{found.loaded_mb:,.1f} MB PSS, "
              f"+{found.rested_mb:,.1f} MB after {args.rest:g} s at rest, "
              f"+{found.live_mb:,.1f} MB of live heap then", flush=True)  # fmt: skip
    ours = held[Layout.TYPED]
    line("layout-parked", ours.live_mb, held[Layout.THREAD].live_mb)
    line("layout-parked-decisions", ours.live_mb, held[Layout.DECISION].live_mb)
    as_batch, as_one = await decisions(args.batch, args.samples)
    print(f"  a decision of {args.batch} events: {as_batch:.2f} ms as a batch of messages, "
          f"{as_one:.2f} ms as one message (p50)", flush=True)  # fmt: skip
    line("layout-decision", as_batch, as_one)
    print_load("after")


if __name__ == "__main__":
    asyncio.run(main())
