"""The runtime's answers to re-execution requests (`tenant.<t>.req.runtime.reexecute`):
every request is answered, with the report or the reason there is none, and a bounded
number run at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
from nats.errors import NoRespondersError

from agency.contracts.reexecution import ReexecutionReply, ReexecutionReport, ReexecutionRequest
from agency.contracts.subjects import reexecution_subject
from agency.infra.jetstream.connection import Bus
from agency.services.runtime.replay.responder import Reexecutions
from tests.helpers import assert_eventually
from tests.runtime.conftest import make_system

_reply = msgspec.json.Decoder(ReexecutionReply)


@asynccontextmanager
async def answering(responder: Reexecutions) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(responder.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)


async def ask(bus: Bus, tenant: str, data: bytes) -> ReexecutionReply:
    msg = await bus.nc.request(reexecution_subject(tenant), data, timeout=10)
    return _reply.decode(msg.data)


def request(thread_id: str, *, tree: bool = True) -> bytes:
    return msgspec.json.encode(ReexecutionRequest(thread_id=thread_id, tree=tree))


async def ready(bus: Bus, tenant: str) -> None:
    """The responder's subscription is in place once it answers anything."""

    async def answers() -> None:
        try:
            await bus.nc.request(reexecution_subject(tenant), b"{}", timeout=1)
        except NoRespondersError as e:
            raise AssertionError("no responder yet") from e

    await assert_eventually(answers)


async def test_a_malformed_request_or_an_unknown_thread_is_answered_with_its_reason(
    bus: Bus, tenant: str
) -> None:
    async with answering(Reexecutions(bus, make_system())):
        await ready(bus, tenant)
        refused = await ask(bus, tenant, b'{"threadId": 1}')
        assert refused.report is None and refused.refused == "invalid"
        assert "malformed re-execution request" in refused.reason
        refused = await ask(bus, tenant, request("bad.id"))
        assert refused.refused == "invalid" and "thread id" in refused.reason
        for tree in (True, False):
            missing = await ask(bus, tenant, request("nosuchthread", tree=tree))
            assert missing.refused == "not_found"
            assert missing.reason == "thread nosuchthread has no events"


class Held(Reexecutions):
    """Re-executions that wait until released, to hold the runtime's slots."""

    def __init__(self, bus: Bus, max_running: int, timeout: float = 10.0) -> None:
        super().__init__(bus, make_system(), max_running=max_running, timeout=timeout)
        self.started = asyncio.Semaphore(0)
        self.release = asyncio.Event()

    async def _reexecute(self, tenant: str, request: ReexecutionRequest) -> ReexecutionReport:
        self.started.release()
        await self.release.wait()
        return ReexecutionReport(same=True, compared=0, threads=())


async def test_beyond_its_bound_the_runtime_answers_busy_at_once(bus: Bus, tenant: str) -> None:
    responder = Held(bus, max_running=1)
    async with answering(responder):
        await ready(bus, tenant)
        first = asyncio.create_task(ask(bus, tenant, request("th1")))
        await asyncio.wait_for(responder.started.acquire(), timeout=10)
        busy = await ask(bus, tenant, request("th2"))
        assert busy.refused == "busy"
        assert busy.reason == "the runtime is running 1 re-executions already; retry in a moment"
        responder.release.set()
        answered = await asyncio.wait_for(first, timeout=10)
        assert answered.report == ReexecutionReport(same=True, compared=0, threads=())


async def test_a_re_execution_longer_than_its_bound_is_answered_timeout(
    bus: Bus, tenant: str
) -> None:
    responder = Held(bus, max_running=2, timeout=0.2)
    async with answering(responder):
        await ready(bus, tenant)
        late = await ask(bus, tenant, request("th1"))
        assert late.refused == "timeout"
        assert late.reason.startswith("re-execution took longer than 0.2 s")
        responder.release.set()
