"""Another process holding a tenant's keys: `python -m tests.store.key_holder URL SEQ`.

It connects as a service does (its cipher installed), then, for each line read on stdin,
opens the sealed event stored at SEQ of the events stream and answers one line:
`opened <type>`, or `refused <reason>`."""

from __future__ import annotations

import asyncio
import sys

from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.decoding import decode_recorded
from agency.infra.jetstream.records import UndecodableEvent


async def main(url: str, seq: int) -> None:
    async with Bus(url, name="key-holder") as bus:
        while await asyncio.to_thread(sys.stdin.readline):
            msg = await bus.js.get_msg(EVENTS_STREAM, seq=seq)
            recorded = decode_recorded(msg.data or b"", seq, msg.subject)
            if isinstance(recorded, UndecodableEvent):
                print(f"refused {recorded.reason}", flush=True)
            else:
                print(f"opened {recorded.type}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
