"""The SDK's client through a proxy, as clients meet one: a `SendStreamingMessage` stream
cut mid-run, then `SubscribeToTask` following the task to its end with nothing missing;
and the cards, read through a proxy that rewrites `Host` and serves the API under a path,
naming the origin the client called, not the API behind the proxy."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError
from a2a.types import GetTaskRequest, StreamResponse, SubscribeToTaskRequest, TaskState

from agency.services.llm.fake_scripts import ScriptStep
from tests.cutting_proxy import Proxy
from tests.forwarding_proxy import proxy as prefix_proxy
from tests.protocols.a2a.conftest import BINDINGS, Tenant
from tests.protocols.a2a.helpers import WAIT, ask

ANSWER = "the answer the model gives once the stream it was asked on has been cut"


def _state(event: StreamResponse) -> int:
    if event.HasField("task"):
        return event.task.status.state
    return event.status_update.status.state


async def _until_cut(events: AsyncIterator[StreamResponse], into: list[StreamResponse]) -> None:
    async with asyncio.timeout(WAIT):
        async for event in events:
            into.append(event)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_cut_stream_is_followed_to_its_end_by_subscribing(
    tenant: Tenant, binding: str
) -> None:
    key = f"a2a-cut-{binding}-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content=ANSWER, stream_delay_ms=20)])
    release = tenant.llm.hold(key)  # the run stays at work until the test lets it go on
    try:
        async with Proxy(tenant.url, cut_after=1, cuts=1) as proxy:
            proxied = dataclasses.replace(tenant, url=proxy.url)
            async with proxied.client("worker", binding) as client:
                before: list[StreamResponse] = []
                with pytest.raises((A2AClientError, httpx.TransportError)):
                    await _until_cut(client.send_message(ask(key)), before)
                assert proxy.cut == 1
                (first,) = before
                task_id = first.task.id
                assert first.task.status.state in (
                    TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING,
                )  # fmt: skip
                followed = client.subscribe(SubscribeToTaskRequest(id=task_id))
                async with asyncio.timeout(WAIT):
                    joined = await anext(followed)
                    assert joined.task.id == task_id
                    assert joined.task.status.state == TaskState.TASK_STATE_WORKING
                    assert not joined.task.artifacts
                    release.set()
                    rest = [e async for e in followed]
                done = await client.get_task(GetTaskRequest(id=task_id))
        # The card, the send and the subscription all went through the proxy (the card
        # names the origin it was asked at).
        assert len(proxy.seen) >= 3, proxy.seen
    finally:
        release.set()
    artifacts = [e.artifact_update for e in rest if e.HasField("artifact_update")]
    assert [p.text for a in artifacts for p in a.artifact.parts] == [ANSWER]
    assert all(a.task_id == task_id for a in artifacts)
    assert _state(rest[-1]) == TaskState.TASK_STATE_COMPLETED
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in done.artifacts for p in a.parts] == [ANSWER]
    assert [m.parts[0].text for m in done.history] == [key, ANSWER]


PREFIX = "/tools/agency"


async def test_the_cards_behind_a_proxy_name_the_origin_the_client_called(
    tenant: Tenant,
) -> None:
    async with prefix_proxy(tenant.url, prefix=PREFIX) as front:
        # The proxy says `X-Forwarded-Proto: https` and the `Host` it was called by.
        public = f"https://{front.url.removeprefix('http://')}{PREFIX}"
        behind = dataclasses.replace(tenant, url=f"{front.url}{PREFIX}")
        card = await behind.card("worker")
        catalogue = await A2ACardResolver(tenant.http, f"{front.url}{PREFIX}").get_agent_card()
        upstream = front.requests
    assert upstream[0].startswith(b"GET /a2a/"), upstream  # the prefix was stripped
    agent = f"{public}/a2a/{tenant.agency}/worker"
    assert [i.url for i in card.supported_interfaces] == [agent, agent]
    assert [i.url for i in catalogue.supported_interfaces] == [f"{public}/a2a"] * 2
    assert catalogue.provider.url == public
    skill = next(s for s in catalogue.skills if s.id == f"{tenant.agency}/worker")
    assert f"Card: {agent}/.well-known/agent-card.json" in skill.description
