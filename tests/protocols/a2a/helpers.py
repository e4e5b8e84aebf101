"""Messages and waits for the A2A tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from a2a.client import Client
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse
from ulid import ULID

WAIT = 30.0


def ask(text: str, *, context: str = "", task: str = "") -> SendMessageRequest:
    message = Message(
        message_id=str(ULID()), role=Role.ROLE_USER, parts=[Part(text=text)],
        context_id=context, task_id=task,
    )  # fmt: skip
    return SendMessageRequest(message=message)


async def collect(
    events: AsyncIterator[StreamResponse], timeout: float = WAIT
) -> list[StreamResponse]:
    async with asyncio.timeout(timeout):
        return [event async for event in events]


async def send(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return await collect(client.send_message(request))
