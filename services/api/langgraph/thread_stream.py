"""A thread's stream (`threads.join_stream`, `GET /threads/{id}/stream`): every run of the
thread as it happens, each in the modes it was started with, until the client leaves.

`run_modes` (the default) sends each run's frames, opened by `metadata` (`{"run_id",
"attempt"}`) and closed by `metadata` (`{"status": "run_done", "run_id"}`); `lifecycle`
sends only those two; `state_update` sends `values` after each event that changed them.
Frames carry the seq of their event as `id`: `Last-Event-ID` resumes after it; without
it the stream starts now.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated

import structlog
from litestar import get
from litestar.exceptions import ValidationException
from litestar.params import QueryParameter
from litestar.response import Stream
from nats.errors import Error as NatsError

from agency.contracts.events import HitlResume, RequestAccepted
from agency.infra.jetstream.errors import StoreError
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.langgraph.follow import folded
from agency.services.api.langgraph.graphstate import GraphView, RunRef, ends_stretch
from agency.services.api.langgraph.parts import Parts, frame
from agency.services.api.langgraph.routes_runs import LastEventId, after_last_event
from agency.services.api.langgraph.scope import AgencyCaller, LgCaller, ThreadIdPath, load_thread
from agency.services.api.sse import KEEPALIVE, sse_answer
from agency.services.api.streaming import ThreadFeed, closing_event

log = structlog.get_logger(__name__)

THREAD_MODES = ("run_modes", "lifecycle", "state_update")


class ThreadFrames:
    """Frames of one thread stream; `after(event)` once the view has applied it."""

    def __init__(self, view: GraphView, modes: tuple[str, ...]) -> None:
        self._view = view
        self._modes = modes
        self._open: dict[str, tuple[RunRef, Parts]] = {}  # by our run id

    def _begin(self, ref: RunRef, seq: int) -> bytes:
        kept = self._view.stream_modes
        modes = kept.get(ref.id) or kept.get(ref.run_id) or ("values",)
        self._open[ref.run_id] = (ref, Parts(modes, ref.id))
        if "run_modes" in self._modes or "lifecycle" in self._modes:
            return frame("metadata", {"run_id": ref.id, "attempt": 1}, seq)
        return b""

    def after(self, event: RecordedEvent) -> bytes:
        out: list[bytes] = []
        match event.payload:
            case RequestAccepted(run_id=accepted):
                out.append(self._begin(RunRef(accepted), event.seq))
            case HitlResume(run_id=resumed):
                pauses = self._view.pauses.get(resumed) or [event.seq]
                out.append(self._begin(RunRef(resumed, pauses[-1]), event.seq))
        of_run = getattr(event.payload, "run_id", None) or event.envelope.run_id
        opened = self._open.get(of_run) if isinstance(of_run, str) else None
        if opened is not None:
            ref, parts = opened
            if "run_modes" in self._modes:
                out.append(parts.after(event, self._view))
            if ends_stretch(event, ref):
                del self._open[ref.run_id]
                if "run_modes" in self._modes or "lifecycle" in self._modes:
                    done = {"status": "run_done", "run_id": ref.id}
                    out.append(frame("metadata", done, event.seq))
        if "state_update" in self._modes and event.seq == self._view.checkpoint_seq:
            out.append(frame("values", self._view.values_with_interrupts(), event.seq))
        return b"".join(out)


async def thread_sse(
    feed: ThreadFeed, view: GraphView, modes: tuple[str, ...], after_seq: int
) -> AsyncIterator[bytes]:
    """The thread's frames after `after_seq`; `view` is folded from the log's start."""
    frames = ThreadFrames(view, modes)
    try:
        async for event in folded(feed, view):
            if event is None:
                yield KEEPALIVE
                continue
            framed = frames.after(event)  # runs going on at `after_seq` are followed on
            if event.seq > after_seq:
                yield framed
    except (NatsError, StoreError, TimeoutError) as e:
        log.warning("langgraph thread stream ended by a NATS error", error=str(e))
    finally:
        await feed.aclose()


def thread_modes(raw: list[str] | None) -> tuple[str, ...]:
    """`stream_mode` (the SDK's name) or `stream_modes`: names, comma-separated or a JSON
    list; none is `run_modes`."""
    named = [m.strip() for item in raw or [] for m in item.strip("[]").split(",")]
    modes = tuple(dict.fromkeys(m.strip('"') for m in named if m.strip('"'))) or ("run_modes",)
    unknown = [m for m in modes if m not in THREAD_MODES]
    if unknown:
        raise ValidationException(
            f"thread stream mode {unknown[0][:40]!r} does not map; use " + ", ".join(THREAD_MODES)
        )
    return modes


@get(
    "/threads/{thread_id:str}/stream",
    summary="LangGraph: a thread's runs as they happen (SSE; Last-Event-ID resumes)",
    media_type="text/event-stream",
)
async def join_thread_stream(
    thread_id: ThreadIdPath,
    caller: LgCaller,
    stream_mode: Annotated[list[str] | None, QueryParameter(name="stream_mode")] = None,
    stream_modes: Annotated[list[str] | None, QueryParameter(name="stream_modes")] = None,
    last_event_id: LastEventId = None,
) -> Stream:
    tenant = caller.tenant
    modes = thread_modes([*(stream_mode or []), *(stream_modes or [])])
    view = await load_thread(caller.deps, tenant, thread_id)
    after = after_last_event(last_event_id, view.last_seq)
    return folded_stream(
        caller, view, lambda feed, folding: thread_sse(feed, folding, modes, after)
    )


def folded_stream(
    caller: AgencyCaller,
    view: GraphView,
    frames: Callable[[ThreadFeed, GraphView], AsyncIterator[bytes]],
) -> Stream:
    """An SSE answer of `frames` over the thread's events from its start, each folded into
    a view of its own as it comes; the feed closes with the answer."""
    closing = closing_event(caller.request.app.state)
    feed = ThreadFeed(caller.deps, caller.tenant, view.thread_id, 0, closing)
    folding = GraphView(tenant_id=caller.tenant, thread_id=view.thread_id)
    return sse_answer(frames(feed, folding), feed.aclose)


THREAD_STREAM_ROUTES = [join_thread_stream]
