"""The AI SDK's chat behind proxies as operators run them: one that rewrites `Host` to its
upstream's name and cuts the chat's stream mid-answer (the SDK's `resume` brings the
whole message back), and one that serves the API under a path, with `X-Forwarded-*`
from a trusted address (the SDK's resume route, a URL it builds from its `api`, reaches
the chat's run through it)."""

from __future__ import annotations

from typing import Any

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.cutting_proxy import Proxy
from tests.forwarding_proxy import proxy
from tests.protocols.aisdk.conftest import Tenant

PREFIX = "/tools/agency"


def _texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


async def test_a_cut_stream_behind_a_host_rewriting_proxy_resumes_whole(tenant: Tenant) -> None:
    key = f"aisdk-host-cut-{tenant.agency}"
    words = " ".join(f"word{i}" for i in range(30))
    tenant.llm.script(key, [ScriptStep(content=words, stream_delay_ms=60)])
    async with Proxy(tenant.url, host="agency", cut_after=4, cuts=1) as front:
        out = await tenant.node("cut", api=tenant.chat_url(base=front.url), text=key)
        assert front.cut == 1
        resumed = [s for s in front.seen if s.method == "GET"]
    assert [s.path for s in resumed] == [f"/aisdk/{tenant.agency}/worker/chat/{out['id']}/stream"]
    before, after = out["before"][-1], out["messages"][-1]
    assert before["role"] == "assistant" and "".join(_texts(before)) != words
    assert after["id"] == before["id"] and _texts(after) == [words]
    assert len(out["messages"]) == 2


async def test_the_resume_route_works_under_a_proxy_prefix(tenant: Tenant) -> None:
    key = f"aisdk-prefix-{tenant.agency}"
    call = ScriptToolCall(name="lookup_guarded", arguments={"word": "w"})
    tenant.llm.script(key, [ScriptStep(tool_calls=(call,)), ScriptStep(content="x")])
    async with proxy(tenant.url, prefix=PREFIX) as front:
        api = tenant.chat_url(base=f"{front.url}{PREFIX}")
        sent = await tenant.node("send", api=api, text=key)
        # The run waits for the approval: the resume route replays its message.
        out = await tenant.node("reconnect", api=api, chatId=sent["id"])
        forwarded = front.requests
    types = [c["type"] for c in out["chunks"]]
    assert types[0] == "start" and types[-1] == "finish"
    assert out["chunks"][0]["messageId"] == sent["messages"][-1]["id"]
    assert "tool-approval-request" in types
    reconnect = f"GET /aisdk/{tenant.agency}/worker/chat/{sent['id']}/stream ".encode()
    assert any(r.startswith(reconnect) for r in forwarded), forwarded
