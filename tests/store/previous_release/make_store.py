"""Write the events store `store.tar.gz` holds, with the previous release's own code.

Run from a checkout of that release (one subject per event type:
`tenant.<t>.evt.<aggregate>.<id>.<event token>`), with this file's directory as the output:

    git archive <previous release> | tar -x -C /tmp/previous
    PYTHONPATH=/tmp/previous python tests/store/previous_release/make_store.py \\
        tests/store/previous_release

It provisions the streams and the shared durables as that release did, appends an agency
and three threads (single events and atomic batches, interleaved), a message that is no
event, and lets the `tools` durable acknowledge the first `tool.requested`; then it stops
the server and packs its JetStream directory. `tests/store/test_upgrade.py` upgrades it.
"""

from __future__ import annotations

import asyncio
import sys
import tarfile
import tempfile
from pathlib import Path

TENANT = "acme"
AGENCY = "agency-1"
THREADS = ("thread-1", "thread-2", "thread-3")


async def write(root: Path) -> None:
    from agency.contracts.events import (
        AgencyCreated,
        MessageAppended,
        RequestAccepted,
        RunCompleted,
        RunStarted,
        RunTick,
        ThreadCreated,
        ToolOutput,
        ToolRequested,
    )
    from agency.contracts.events.base import ChatMessage, ToolCall
    from agency.infra.jetstream.connection import Bus
    from agency.infra.jetstream.consumers import TOOL_REQUESTS
    from agency.infra.jetstream.records import Position
    from agency.infra.jetstream.streams import provision
    from agency.infra.launch import NatsServer

    async with NatsServer(root, sync_interval="always") as server, Bus(server.url) as bus:
        await provision(bus.js)
        store = bus.store
        agency = await store.append(
            TENANT, "agency", AGENCY, [AgencyCreated(name="travel")], expected=Position()
        )
        assert agency.events
        at: dict[str, Position] = {}
        for thread in THREADS:
            created = ThreadCreated(agency_id=AGENCY, agent_type="helper")
            result = await store.append(TENANT, "thread", thread, [created], expected=Position())
            at[thread] = result.position
        for step, thread in enumerate(THREADS, start=1):
            run = f"run-{thread}"
            hello = ChatMessage(role="user", content=f"hello from {thread}")
            opening = [
                RequestAccepted(run_id=run, idempotency_key=f"key-{thread}", messages=(hello,)),
                RunStarted(run_id=run, agent_type="helper", max_steps=5),
                MessageAppended(message=hello),
                RunTick(run_id=run, step=1),
            ]
            result = await store.append(TENANT, "thread", thread, opening, expected=at[thread])
            call = ToolCall(id=f"call-{step}", name="search", arguments='{"q": "x"}')
            asked = ToolRequested(run_id=run, step=1, call=call)
            result = await store.append(TENANT, "thread", thread, [asked], expected=result.position)
            at[thread] = result.position
        await bus.js.publish(f"tenant.{TENANT}.evt.thread.{THREADS[2]}.message_appended", b"{no")
        at[THREADS[2]] = (
            await store.read_positioned(TENANT, "thread", THREADS[2], after=at[THREADS[2]])
        )[1]
        for step, thread in enumerate(THREADS[:2], start=1):
            run = f"run-{thread}"
            answer = [
                ToolOutput(
                    run_id=run, tool_call_id=f"call-{step}", tool_name="search", output="found"
                ),
                MessageAppended(message=ChatMessage(role="assistant", content="done")),
                RunCompleted(run_id=run, result="done"),
            ]
            result = await store.append(TENANT, "thread", thread, answer, expected=at[thread])
        tools = await bus.js.pull_subscribe_bind(durable=TOOL_REQUESTS.name, stream=store.stream)
        [first] = await tools.fetch(1, timeout=5)
        await first.ack_sync()
        await tools.unsubscribe()


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="agency-previous-") as tmp:
        root = Path(tmp) / "nats"
        asyncio.run(write(root))
        with tarfile.open(out / "store.tar.gz", "w:gz") as archive:
            archive.add(root / "jetstream", arcname="jetstream")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
