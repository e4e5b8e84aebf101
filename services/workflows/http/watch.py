"""Following a workflow live, from the log: its channel, the text its members stream, their
tool calls, until the workflow has gone quiet after a given message.

One ordered reader over the tenant's events from a stream sequence taken before the
message was sent, kept to the workflow's aggregate and its members' threads, so nothing
the message caused can be missed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agency.contracts.events import (
    ChannelMessagePosted,
    ModelCompleted,
    ModelDelta,
    ModelStarted,
    ToolStarted,
    Usage,
)
from agency.domain.workflow_state import WorkflowState, fold
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.reader import OrderedReader
from agency.infra.jetstream.records import RecordedEvent


@dataclass(frozen=True, slots=True)
class Chunk:
    agent: str
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallSeen:
    agent: str
    tool: str
    args: Any


@dataclass(frozen=True, slots=True)
class Posted:
    seq: int
    sender: str
    content: str
    mentions: tuple[str, ...]


@dataclass
class Done:
    content: str = ""
    tool_calls: list[ToolCallSeen] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    messages: list[Posted] = field(default_factory=list)
    status: str = "settled"


Item = Chunk | ToolCallSeen | Posted | Done


# Each partition's last stream sequence (the one stream's, partition 0, on a log of one).
LogPosition = dict[int, int]


async def log_position(bus: Bus) -> LogPosition:
    """Each events stream's last sequence: a watch started from here misses nothing after."""
    layout = bus.layout
    position: LogPosition = {}
    for partition in range(layout.partitions):
        info = await bus.js.stream_info(layout.stream(partition))
        position[partition] = int(info.state.last_seq)
    return position


def _args(arguments: str) -> Any:
    import json

    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments


async def watch(
    bus: Bus,
    tenant_id: str,
    workflow_id: str,
    message_id: str,
    *,
    after_stream_seq: LogPosition,
    timeout: float,
) -> AsyncIterator[Item]:
    """Items caused by the message `message_id`, ending with one `Done` (status `settled`,
    `stopped` or `timeout`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    done = Done()
    streamed: set[tuple[str, str, int]] = set()
    state = fold(await bus.store.read(tenant_id, "workflow", workflow_id), workflow_id)
    threads = {m.thread_id: m.name for m in state.members.values()}
    layout = bus.layout
    async with contextlib.AsyncExitStack() as stack:
        # A reader per partition: the workflow's and its members' events lie in any.
        readers = [
            await stack.enter_async_context(
                OrderedReader(
                    bus.js,
                    layout.tenant_filter(tenant_id, partition),
                    start_seq=after_stream_seq.get(partition, 0) + 1,
                    stream=layout.stream(partition),
                )
            )
            for partition in range(layout.partitions)
        ]
        turn = 0
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                done.status = "timeout"
                yield done
                return
            reader = readers[turn % len(readers)]
            turn += 1
            batch = await reader.next_batch(timeout=min(remaining, 1.0 / len(readers)))
            touched = False
            for delivered in batch:
                if not isinstance(delivered, RecordedEvent):
                    continue
                env = delivered.envelope
                if env.aggregate == "workflow" and env.aggregate_id == workflow_id:
                    touched = True
                    if isinstance(env.payload, ChannelMessagePosted):
                        p = env.payload
                        posted = Posted(env.seq, p.sender, p.content, p.mentions)
                        done.messages.append(posted)
                        yield posted
                elif env.aggregate == "thread" and env.aggregate_id in threads:
                    agent = threads[env.aggregate_id]
                    for item in _thread_item(agent, delivered, streamed, done):
                        yield item
            if touched:
                state = fold(await bus.store.read(tenant_id, "workflow", workflow_id), workflow_id)
                threads = {m.thread_id: m.name for m in state.members.values()}
                if _finished(state, message_id):
                    done.status = "stopped" if state.status == "stopped" else "settled"
                    answers = [m for m in done.messages if m.sender in state.members]
                    done.content = answers[-1].content if answers else ""
                    yield done
                    return


def _finished(state: WorkflowState, message_id: str) -> bool:
    posted = any(m.message_id == message_id for m in state.messages)
    return posted and state.settled


def _thread_item(
    agent: str, event: RecordedEvent, streamed: set[tuple[str, str, int]], done: Done
) -> list[Item]:
    env = event.envelope
    match env.payload:
        case ModelStarted():
            return []
        case ModelDelta(run_id=run_id, step=step, delta=text):
            streamed.add((env.aggregate_id, run_id, step))
            return [Chunk(agent, text)]
        case ModelCompleted(run_id=run_id, step=step, message=message, usage=usage):
            done.usage = Usage(
                input_tokens=done.usage.input_tokens + usage.input_tokens,
                output_tokens=done.usage.output_tokens + usage.output_tokens,
            )
            # An answer complete within one streaming window has no deltas: send it whole.
            if message.content and (env.aggregate_id, run_id, step) not in streamed:
                return [Chunk(agent, message.content)]
            return []
        case ToolStarted(tool_name=name, arguments=arguments, attempt=1):
            seen = ToolCallSeen(agent, name, _args(arguments))
            done.tool_calls.append(seen)
            return [seen]
    return []
