"""Following one LangGraph run (a stretch of our run) through the thread's log: to its end
(`wait`, `join`) or as Server-Sent Events (`stream`, with `Last-Event-ID`).

Both read the log like the thread's own SSE route (`services.api.streaming.ThreadFeed`):
stored events, then live ones, each once and in order, so a stream resumed after the seq
in `Last-Event-ID` misses nothing and repeats nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import structlog
from nats.errors import Error as NatsError

from agency.infra.jetstream.errors import StoreError
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.graphstate import GraphView, RunRef, ends_stretch
from agency.services.api.langgraph.parts import Parts, frame
from agency.services.api.langgraph.views import GraphViews
from agency.services.api.sse import KEEPALIVE, stored_then_live
from agency.services.api.streaming import ThreadFeed

log = structlog.get_logger(__name__)


async def folded(feed: ThreadFeed, view: GraphView) -> AsyncIterator[RecordedEvent | None]:
    """The feed's events, stored then live, each folded into `view` before it is handed
    on; None for a quiet spell (a keep-alive)."""
    async for event in stored_then_live(await feed.backfill(), feed.live()):
        if event is not None:
            view.apply(event)
        yield event


def _belongs(event: RecordedEvent, ref: RunRef) -> bool:
    run_id = getattr(event.payload, "run_id", None) or event.envelope.run_id
    return event.seq > ref.after_seq and run_id == ref.run_id


async def wait_for_end(
    deps: ApiDeps,
    tenant: str,
    thread_id: str,
    ref: RunRef,
    closing: asyncio.Event,
    timeout: float,
    view: GraphView | None = None,
    feed: ThreadFeed | None = None,
) -> GraphView | None:
    """The thread folded up to where the run's stretch ended, or None after `timeout`.
    `view`, folded before the stretch began, is folded on from where it stands; `feed`:
    its events from there on, when the caller has them followed already."""
    view = view or GraphView(tenant_id=tenant, thread_id=thread_id)
    feed = feed or following(deps, view, closing)
    try:
        async with asyncio.timeout(timeout):
            for event in await feed.backfill():
                view.apply(event)
                if ends_stretch(event, ref):
                    return _kept(deps, view)
            async for batch in feed.live():
                for event in batch:
                    view.apply(event)
                    if ends_stretch(event, ref):
                        return _kept(deps, view)
    except TimeoutError:
        return None
    finally:
        await feed.aclose()
    return None  # the server is closing


def _kept(deps: ApiDeps, view: GraphView) -> GraphView:
    """`view`, folded on from the log as far as the feed went, kept for the thread's next
    load: a client that waits for a run and then resumes it (or asks its state) has the
    thread read on from here, not from where the run began."""
    deps.graph_views.keep(view)
    return view


def following(deps: ApiDeps, view: GraphView, closing: asyncio.Event) -> ThreadFeed:
    """The thread's events after those `view` has folded."""
    return ThreadFeed(
        deps, view.tenant_id, view.thread_id, view.last_seq, closing, position=view.position
    )


async def sse(
    feed: ThreadFeed,
    view: GraphView,
    ref: RunRef,
    modes: tuple[str, ...],
    after_seq: int,
    kept: GraphViews | None = None,
) -> AsyncIterator[bytes]:
    """The run's stretch as LangGraph SSE frames: `metadata` first, then the frames of each
    of its events after `after_seq`, until the stretch ends. `kept`: where `view` (folded
    from the log's start, or on from a view that was) is kept once the stretch ended."""
    parts = Parts(modes, ref.id)
    try:
        # Inside the `try`: a client gone after this frame still closes the feed, which
        # may hold a live reader already (opened for the run's status).
        yield frame("metadata", {"run_id": ref.id, "attempt": 1}, None)
        async for event in folded(feed, view):
            if event is None:
                yield KEEPALIVE
                continue
            if _belongs(event, ref) and event.seq > after_seq:
                yield parts.after(event, view)
            if ends_stretch(event, ref):
                if kept is not None:
                    kept.keep(view)
                return
    except (NatsError, StoreError, TimeoutError) as e:
        # The response has started: end it; the client resumes with Last-Event-ID.
        log.warning("langgraph run stream ended by a NATS error", error=str(e))
    finally:
        await feed.aclose()
