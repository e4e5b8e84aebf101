"""A readable timeline of one thread or a whole tree: one line (or JSON object) per event.

Each line carries the time, the thread (in a tree), the thread's own sequence, the run step
the event belongs to, the event type and its essentials (`domain.event_text`): model
text, tool calls and results, approvals, children spawned.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from agency.contracts.codec import encode
from agency.contracts.events import (
    AgentCompleted,
    AgentStarted,
    Event,
    MiddlewareAfterModel,
    MiddlewareBeforeModel,
    RunStarted,
    RunTick,
)
from agency.contracts.records import RecordedEvent
from agency.domain.event_text import clip, summarize

DELTA = "model.delta"
_STREAMED = frozenset({DELTA, "reply.delta"})


@dataclass(frozen=True, slots=True)
class Row:
    event: RecordedEvent
    depth: int
    step: int | None

    @property
    def thread_id(self) -> str:
        return self.event.envelope.aggregate_id


@dataclass(frozen=True, slots=True)
class Window:
    """Which events to show. Sequence bounds are stream sequences, so one window cuts a
    whole tree at the same moment; `types` are shell patterns (`tool.*`)."""

    from_stream_seq: int = 0
    until_stream_seq: int | None = None
    types: tuple[str, ...] = ()
    deltas: bool = False

    def shows(self, event: RecordedEvent) -> bool:
        if event.stream_seq < self.from_stream_seq:
            return False
        if self.until_stream_seq is not None and event.stream_seq > self.until_stream_seq:
            return False
        if self.types:
            return any(fnmatch.fnmatchcase(event.type, t) for t in self.types)
        # Streamed text is coalesced into model.completed: deltas only on request.
        return self.deltas or event.type not in _STREAMED


def window_for(
    root_events: Sequence[RecordedEvent],
    *,
    from_seq: int | None = None,
    until_seq: int | None = None,
    types: Sequence[str] = (),
    deltas: bool = False,
) -> Window:
    """A window from the root thread's own sequence numbers."""
    low = 0
    high: int | None = None
    if from_seq is not None:
        later = [e.stream_seq for e in root_events if e.seq >= from_seq]
        low = later[0] if later else (root_events[-1].stream_seq + 1 if root_events else 0)
    if until_seq is not None:
        earlier = [e.stream_seq for e in root_events if e.seq <= until_seq]
        high = earlier[-1] if earlier else 0
    wanted = tuple(t.strip() for item in types for t in item.split(",") if t.strip())
    return Window(low, high, wanted, deltas)


def rows(events: Iterable[tuple[int, RecordedEvent]], window: Window) -> Iterator[Row]:
    """(depth, event) pairs in stream order → rows, with each event's run step."""
    steps: dict[tuple[str, str], int] = {}
    for depth, event in events:
        payload = event.payload
        run_id = event.envelope.run_id
        step: int | None = getattr(payload, "step", None)
        match payload:
            case RunStarted(run_id=started):
                steps[(event.envelope.aggregate_id, started)] = 0
            case RunTick(run_id=ticked, step=ticked_step):
                steps[(event.envelope.aggregate_id, ticked)] = ticked_step
        if step is None and run_id is not None:
            step = steps.get((event.envelope.aggregate_id, run_id))
        if window.shows(event):
            yield Row(event=event, depth=depth, step=step)


def summary(payload: Event) -> str:
    """The event's one-line essentials, with the few types the shared summaries leave blank."""
    text = summarize(payload)
    if text:
        return text
    match payload:
        case (
            MiddlewareBeforeModel(middleware_name=name) | MiddlewareAfterModel(middleware_name=name)
        ):
            return name
        case AgentStarted(model=model):
            return model
        case AgentCompleted(result=result):
            return clip(result)
    return ""


def label(thread_id: str) -> str:
    """A short name for a thread in a tree: ULIDs differ in their random tail."""
    return thread_id[-6:]


# Checkpoints verified against the log (`services.runtime.checkpoint.verify`):
# (thread id, seq of the checkpoint) → whether the log folds to its hash.
Checks = Mapping[tuple[str, int], bool]


def check_note(row: Row, checks: Checks) -> str:
    ok = checks.get((row.thread_id, row.event.envelope.seq))
    if ok is None:
        return ""
    return " ✓ the log folds to it" if ok else " ✗ the log folds to another state"


def format_row(row: Row, *, tree: bool = False, checks: Checks | None = None) -> str:
    env = row.event.envelope
    ts = env.ts.strftime("%H:%M:%S.%f")[:-3]
    step = "-" if row.step is None else str(row.step)
    where = f"{'  ' * row.depth}{label(env.aggregate_id)}" if tree else ""
    where = f"{where:<16}" if tree else ""
    note = check_note(row, checks or {})
    line = f"{ts} {where}#{env.seq:<5} {step:>4}  {env.type:<24} {summary(env.payload)}{note}"
    return line.rstrip()


class JsonRow(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    thread_id: str
    depth: int
    seq: int
    stream_seq: int
    ts: str
    type: str
    run_id: str | None
    step: int | None
    summary: str
    event: msgspec.Raw


_json = msgspec.json.Encoder()


def json_row(row: Row) -> str:
    env = row.event.envelope
    raw = row.event.raw or encode(env)
    return _json.encode(
        JsonRow(
            thread_id=env.aggregate_id,
            depth=row.depth,
            seq=env.seq,
            stream_seq=row.event.stream_seq,
            ts=env.ts.isoformat(),
            type=env.type,
            run_id=env.run_id,
            step=row.step,
            summary=summary(env.payload),
            event=msgspec.Raw(raw),
        )
    ).decode()
