"""A run's `webhook` through the official SDK client: a signed POST when the run ends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from langgraph_sdk.errors import BadRequestError, PermissionDeniedError

from agency.services.llm.fake_scripts import ScriptStep
from agency.services.webhook_signing import SIGNATURE_HEADER, verify
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask, call

SECRET = "whsec-test"


class Receiver:
    """An HTTP endpoint on loopback that answers each POST with the next status given."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.received: asyncio.Queue[tuple[dict[str, str], bytes]] = asyncio.Queue()
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")[1:]
        headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines if ln)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        status = self.statuses.pop(0) if self.statuses else 200
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        writer.close()
        await self.received.put((headers, body))


@pytest.fixture
async def receiver(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Receiver]:
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    monkeypatch.setenv("AGENCY_WEBHOOK_SECRET", SECRET)
    found = Receiver([503])  # the first attempt fails: the POST is retried
    server = await asyncio.start_server(found._serve, "127.0.0.1", 0)
    found.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    async with server:
        yield found


async def test_the_end_of_a_run_is_posted_signed_and_retried(
    lg: LangGraph, receiver: Receiver
) -> None:
    key = "lg-webhook-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="done")])
    thread = await lg.client.threads.create(graph_id="worker")
    run = await lg.client.runs.create(
        thread["thread_id"], "worker", input=ask(key), webhook=receiver.url
    )
    async with asyncio.timeout(30):
        first = await receiver.received.get()  # answered 503
        headers, body = await receiver.received.get()
    assert first[1] == body
    assert verify(body, headers[SIGNATURE_HEADER.lower()], SECRET)
    assert not verify(body, headers[SIGNATURE_HEADER.lower()], "another secret")
    sent = json.loads(body)
    assert sent["run_id"] == run["run_id"] and sent["thread_id"] == thread["thread_id"]
    assert sent["status"] == "success" and sent["assistant_id"] == "worker"


async def test_a_run_stopping_at_an_interrupt_is_posted_too(
    lg: LangGraph, receiver: Receiver
) -> None:
    receiver.statuses.clear()
    key = "lg-webhook-hitl-" + lg.agency
    lg.llm.script(key, [ScriptStep(tool_calls=[call("lookup", word="w")])])
    thread = await lg.client.threads.create(graph_id="approver")
    await lg.client.runs.create(
        thread["thread_id"], "approver", input=ask(key), webhook=receiver.url
    )
    async with asyncio.timeout(30):
        _, body = await receiver.received.get()
    assert json.loads(body)["status"] == "success"
    assert (await lg.client.threads.get(thread["thread_id"]))["status"] == "interrupted"


async def test_a_run_stopping_at_a_breakpoint_before_the_model_is_posted_too(
    lg: LangGraph, receiver: Receiver
) -> None:
    receiver.statuses.clear()
    key = "lg-webhook-breakpoint-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="never asked yet")])
    thread = await lg.client.threads.create(graph_id="worker")
    run = await lg.client.runs.create(
        thread["thread_id"],
        "worker",
        input=ask(key),
        webhook=receiver.url,
        interrupt_before=["model"],
    )
    async with asyncio.timeout(30):
        _, body = await receiver.received.get()
    sent = json.loads(body)
    assert sent["run_id"] == run["run_id"] and sent["status"] == "success"
    assert (await lg.client.threads.get(thread["thread_id"]))["status"] == "interrupted"


async def test_a_webhook_to_a_private_address_or_without_a_secret_is_refused(
    lg: LangGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = await lg.client.threads.create(graph_id="worker")
    monkeypatch.setenv("AGENCY_WEBHOOK_SECRET", SECRET)
    monkeypatch.delenv("AGENCY_ALLOW_HOSTS", raising=False)
    with pytest.raises(PermissionDeniedError, match="AGENCY_ALLOW_HOSTS"):
        await lg.client.runs.create(
            thread["thread_id"], "worker", input=ask("x"), webhook="http://10.0.0.7/hook"
        )
    with pytest.raises(BadRequestError, match="http"):
        await lg.client.runs.create(
            thread["thread_id"], "worker", input=ask("x"), webhook="ftp://example.com/x"
        )
    with pytest.raises(BadRequestError, match="control character"):
        await lg.client.runs.create(
            thread["thread_id"], "worker", input=ask("x"), webhook="https://example.com/\x05"
        )
    monkeypatch.delenv("AGENCY_WEBHOOK_SECRET")
    with pytest.raises(BadRequestError, match="AGENCY_WEBHOOK_SECRET"):
        await lg.client.runs.create(
            thread["thread_id"], "worker", input=ask("x"), webhook="https://example.com/hook"
        )
    assert await lg.client.runs.list(thread["thread_id"]) == []
    before = await lg.client.threads.count()
    with pytest.raises(BadRequestError, match="AGENCY_WEBHOOK_SECRET"):
        await lg.client.runs.create(None, "worker", input=ask("x"), webhook="https://example.com")
    with pytest.raises(BadRequestError, match="batch item 0: webhooks are off"):
        await lg.client.runs.create_batch(
            [{"assistant_id": "worker", "input": ask("x"), "webhook": "https://example.com"}]
        )
    assert await lg.client.threads.count() == before  # no thread made for a refused run


async def test_a_crons_runs_carry_its_webhook_and_breakpoints(
    lg: LangGraph, receiver: Receiver
) -> None:
    """A cron's `webhook` and `interrupt_before` are its schedule's: each tick's run is
    asked for with them, so it stops before its model call and its end is posted."""
    key = "lg-cron-webhook-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="not before the breakpoint")] * 5)
    cron = await lg.client.crons.create(
        "worker", schedule="* * * * * *", input=ask(key), webhook=receiver.url,
        interrupt_before=["model"],
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            first = await receiver.received.get()  # answered 503
            headers, body = await receiver.received.get()
    finally:
        await lg.client.crons.delete(cron["cron_id"])
    assert first[1] == body and verify(body, headers[SIGNATURE_HEADER.lower()], SECRET)
    sent = json.loads(body)
    assert sent["thread_id"] == cron["thread_id"] and sent["status"] == "success"
    state = await lg.client.threads.get_state(cron["thread_id"])
    assert state["next"] == ["model"]
    contents = [m["content"] for m in state["values"]["messages"]]
    assert any(key in c for c in contents) and "not before the breakpoint" not in contents


async def test_a_cron_webhook_is_held_to_the_same_rules(lg: LangGraph) -> None:
    with pytest.raises(PermissionDeniedError, match="refused"):
        await lg.client.crons.create(
            "worker", schedule="0 9 * * *", input=ask("x"), webhook="http://10.0.0.7/hook"
        )
    with pytest.raises(BadRequestError, match="'nodes'"):
        await lg.client.crons.create(
            "worker", schedule="0 9 * * *", input=ask("x"), interrupt_before=["nodes"]
        )
