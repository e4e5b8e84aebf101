"""`POST …/reexecute` asks the runtime over the bus: with no runtime to answer, or one
that does not answer in time, the route answers 503 saying so, never hangs or 500s."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from nats.aio.msg import Msg

from agency.contracts.subjects import REEXECUTIONS
from agency.infra.jetstream.connection import Bus
from agency.services.api import routes_console
from tests.api.conftest import Thread


async def test_reexecution_answers_503_when_no_runtime_is_running(
    client: httpx.AsyncClient, thread_a: Thread
) -> None:
    r = await client.post(
        f"{thread_a.path}/reexecute", json={"tree": False}, headers=thread_a.tenant.auth
    )
    assert r.status_code == 503, r.text
    assert r.json() == {
        "error": "no runtime is running to re-execute the thread; retry once the runtime "
        "service is up",
        "status": 503,
    }


async def test_reexecution_answers_503_when_the_runtime_does_not_answer_in_time(
    client: httpx.AsyncClient, thread_a: Thread, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: asyncio.Queue[Msg] = asyncio.Queue()
    sub = await bus.nc.subscribe(REEXECUTIONS, cb=asked.put)  # hears, never answers
    monkeypatch.setattr(routes_console, "ANSWER_TIMEOUT", 0.5)
    try:
        r = await client.post(f"{thread_a.path}/reexecute", headers=thread_a.tenant.auth)
    finally:
        await sub.unsubscribe()
    assert r.status_code == 503, r.text
    assert r.json()["error"].startswith("no runtime answered the re-execution within 0.5 s")
    request = asked.get_nowait()
    assert request.subject == f"tenant.{thread_a.tenant.id}.req.runtime.reexecute"
