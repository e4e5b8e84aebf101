"""The runtime answers re-execution requests (`tenant.<t>.req.runtime.reexecute`).

Whoever asks (the API's console route) names a thread; the runtime reads it (with its
subagents, unless `tree` is false) and the agencies' blueprint events from the log, runs
its current code over the recorded inputs in memory (`reexecute`) and answers the
comparison (`contracts/reexecution.py`). Nothing is written; no model or tool is called.

Every runtime process answers in one queue group, so one of them takes each request. A
process runs at most `max_running` re-executions at once and answers `busy` beyond that
rather than queueing (a re-execution holds the event loop the live threads share); each is
bounded by `REEXECUTION_SECONDS`. A request is always answered, with the report or the
reason there is none: the handler never raises.
"""

from __future__ import annotations

import asyncio
from dataclasses import KW_ONLY, dataclass, field

import msgspec
import structlog
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from agency.contracts.errors import InvalidToken
from agency.contracts.ids import validate_token
from agency.contracts.reexecution import (
    REEXECUTION_SECONDS,
    ComparedEvent,
    FirstDivergence,
    ReexecutionReply,
    ReexecutionReport,
    ReexecutionRequest,
    Refusal,
    ThreadComparison,
)
from agency.contracts.subjects import REEXECUTIONS, tenant_of
from agency.domain.comparison import Comparison
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import StoreError
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.jetstream.responders import Requests
from agency.services.agents.system import AgentSystem
from agency.services.runtime.replay.reexecute import reexecute
from agency.services.threads.reads import ThreadNotFound
from agency.services.threads.tree import ThreadTree, TreeNode, load_tree

log = structlog.get_logger(__name__)

QUEUE = "runtime-reexecute"
MAX_RUNNING = 2
_request_decoder = msgspec.json.Decoder(ReexecutionRequest)
_encoder = msgspec.json.Encoder()


@dataclass(eq=False)
class Reexecutions:
    """The runtime's answers to re-execution requests, `max_running` at a time."""

    bus: Bus
    system: AgentSystem
    _: KW_ONLY
    max_running: int = MAX_RUNNING
    timeout: float = REEXECUTION_SECONDS
    _requests: Requests = field(
        default_factory=lambda: Requests(REEXECUTIONS, queue=QUEUE), init=False
    )

    async def run(self, stop: asyncio.Event, *, drain_timeout: float = 10.0) -> None:
        log.info("re-executions answered", subject=REEXECUTIONS, max_running=self.max_running)
        await self._requests.serve(self.bus.nc, self._on_msg, stop, drain_timeout)

    async def _on_msg(self, msg: Msg) -> None:
        if len(self._requests) >= self.max_running:
            reason = (
                f"the runtime is running {self.max_running} re-executions already; "
                "retry in a moment"
            )
            await self._respond(msg, _refused("busy", reason))
            return
        self._requests.start(self._handle(msg))

    async def _handle(self, msg: Msg) -> None:
        try:
            reply = await self._answer(msg)
        except Exception:  # whatever failed is answered, never raised out of the loop
            log.exception("re-execution request failed", subject=msg.subject)
            reply = _refused("failed", "the runtime could not re-execute the thread")
        await self._respond(msg, reply)

    async def _answer(self, msg: Msg) -> ReexecutionReply:
        try:
            tenant = tenant_of(msg.subject)
            request = _request_decoder.decode(msg.data)
            validate_token("thread id", request.thread_id)
        except (InvalidToken, msgspec.DecodeError) as e:
            return _refused("invalid", f"malformed re-execution request: {e}")
        try:
            async with asyncio.timeout(self.timeout):
                report = await self._reexecute(tenant, request)
        except TimeoutError:
            return _refused(
                "timeout",
                f"re-execution took longer than {self.timeout:g} s; try the thread alone "
                "(tree: false) or the CLI (agency replay --re-execute)",
            )
        except ThreadNotFound:
            return _refused("not_found", f"thread {request.thread_id} has no events")
        except (StoreError, NatsError) as e:
            log.warning("re-execution could not read the log", error=str(e))
            return _refused("failed", "the runtime could not read the record; retry")
        return ReexecutionReply(report=report)

    async def _reexecute(self, tenant: str, request: ReexecutionRequest) -> ReexecutionReport:
        tree = await _tree(self.bus, tenant, request.thread_id, whole=request.tree)
        agency_events: list[RecordedEvent] = []
        agencies = {n.events[0].envelope.agency_id for n in tree.nodes if n.events}
        for agency in sorted(a for a in agencies if a):
            agency_events.extend(await self.bus.store.read(tenant, "agency", agency))
        report = await reexecute(
            [node.events for node in tree.nodes], self.system, agency_events=agency_events
        )
        by_thread = {c.thread_id: c for c in report.comparisons}
        threads = tuple(
            _thread(node, by_thread[node.thread_id])
            for node in tree.nodes
            if node.thread_id in by_thread
        )
        return ReexecutionReport(same=report.same, compared=report.compared, threads=threads)

    async def _respond(self, msg: Msg, reply: ReexecutionReply) -> None:
        await _respond(msg, reply, self.bus.nc.max_payload)


async def _tree(bus: Bus, tenant: str, thread_id: str, *, whole: bool) -> ThreadTree:
    if whole:
        return await load_tree(bus.store, bus.nc, tenant, thread_id)
    events = await bus.store.read(tenant, "thread", thread_id)
    if not events:
        raise ThreadNotFound(tenant, thread_id)
    return ThreadTree(thread_id, (TreeNode(thread_id, None, 0, tuple(events)),))


def _side(events: tuple[RecordedEvent, ...]) -> tuple[ComparedEvent, ...]:
    return tuple(ComparedEvent(envelope=e.envelope, stream_seq=e.stream_seq) for e in events)


def _thread(node: TreeNode, c: Comparison) -> ThreadComparison:
    d = c.divergence
    return ThreadComparison(
        thread_id=c.thread_id,
        parent_id=node.parent_id,
        depth=node.depth,
        same=c.same,
        compared=c.compared,
        divergence=FirstDivergence(index=d.index, differences=d.differences) if d else None,
        note=c.stopped,
        error=c.failed,
        recorded=_side(c.recorded),
        reexecuted=_side(c.reexecuted),
    )


def _refused(refusal: Refusal, reason: str) -> ReexecutionReply:
    return ReexecutionReply(refused=refusal, reason=reason)


async def _respond(msg: Msg, reply: ReexecutionReply, limit: int) -> None:
    data = _encoder.encode(reply)
    if len(data) > limit:
        data = _encoder.encode(
            _refused(
                "too_large",
                f"the comparison of {len(data)} bytes exceeds the broker's largest message "
                f"({limit} bytes); try the thread alone (tree: false) or the CLI "
                "(agency replay --re-execute)",
            )
        )
    try:
        await msg.respond(data)
    except NatsError as e:  # the asker has gone, or the connection: it times out on its side
        log.warning("re-execution answer not sent", subject=msg.subject, error=str(e))
