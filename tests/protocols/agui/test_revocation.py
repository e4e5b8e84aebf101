"""A run's AG-UI stream is cut when the key that opened it is revoked, as every stream is
(`services/api/revocation.py`): the cut frame, then nothing, while the run goes on."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from httpx_sse import aconnect_sse

from agency.services.api.revocation import CUT_SECONDS
from agency.services.llm.fake_scripts import ScriptStep
from tests.protocols.agui.conftest import Tenant


async def test_revoking_the_key_cuts_the_run_s_stream(tenant: Tenant) -> None:
    key = f"agui-revoke-{tenant.agency}"
    # A word every 40 ms for about 16 s: the stream is live all through the test.
    tenant.llm.script(key, [ScriptStep(content="word ", repeat=400, stream_delay_ms=40)])
    own = {"Authorization": f"Bearer {tenant.key}"}
    async with httpx.AsyncClient(base_url=tenant.url, timeout=30) as http:
        made = await http.post("/keys", json={"name": "stream"}, headers=own)
        assert made.status_code == 201, made.text
        body = {
            "threadId": str(uuid.uuid4()),
            "runId": "r1",
            "messages": [{"id": "m1", "role": "user", "content": f"{key}: talk"}],
        }
        bearer = {"Authorization": f"Bearer {made.json()['apiKey']}"}
        route = f"/agui/{tenant.agency}/worker"
        after: list[str] = []
        async with aconnect_sse(http, "POST", route, json=body, headers=bearer) as source:
            frames = source.aiter_sse()
            async with asyncio.timeout(30):
                async for frame in frames:
                    if '"TEXT_MESSAGE_CONTENT"' in frame.data:
                        break
            gone = await http.delete(f"/keys/{made.json()['keyId']}", headers=own)
            assert gone.status_code == 204, gone.text
            async with asyncio.timeout(CUT_SECONDS + 5):
                after = [f"{frame.event} {frame.data}" async for frame in frames]
    assert after, "the stream ended without the cut frame"
    assert after[-1].startswith("error ") and "api_key_revoked" in after[-1]
    assert not any("RUN_FINISHED" in f for f in after)
