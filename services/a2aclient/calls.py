"""One message to a remote agent, and what it answered.

The message goes with the SDK's client (`a2a-sdk`), streaming when the card says the
agent streams, on the card's first interface of a binding the client speaks (JSON-RPC,
HTTP+JSON). The call waits until the task is completed, failed, canceled, rejected, or
needs input or authentication, or the agent answered with a message; a task still working
when the stream ends (or that a non-streaming agent returned early) is polled until then.
All of it within the agent's `timeout`.

What the model reads: the task's artifacts (text parts, data as JSON, a file as its
name), else the text of its last status message. A task that asks for input is an
answer, saying so: the next call in the thread continues the same remote conversation
(`contextId`), and answers that task (`taskId`). A task that failed, was canceled or
rejected, or needs authentication, is a `RemoteAgentError` naming its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass
from typing import cast

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types import (
    Artifact,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from agency.contracts.events import RemoteAgent
from agency.services.a2aclient.cards import RemoteAgentError, RemoteCards, http_client, unreachable
from agency.services.egress import EgressRefused

BINDINGS = ["JSONRPC", "HTTP+JSON"]
POLL_INTERVAL = 0.5

_DONE = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
}
_ENDED_BADLY = {
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "was canceled",
    TaskState.TASK_STATE_REJECTED: "rejected the request",
    TaskState.TASK_STATE_AUTH_REQUIRED: "needs authentication this agent cannot give",
}


@dataclass(frozen=True, slots=True)
class Answer:
    """What the agent answered, the remote conversation it belongs to, and the task that
    waits for input (else "")."""

    text: str
    context_id: str
    task_id: str = ""


@dataclass(slots=True)
class Conversation:
    """Where a call goes on: the remote conversation (empty: a new one) and the task
    that asked for input (empty: none). A call sets both to what the agent answered."""

    context_id: str = ""
    task_id: str = ""


async def send(
    cards: RemoteCards, agent: RemoteAgent, text: str, conversation: Conversation, message_id: str
) -> Answer:
    """Send `text` to the agent in `conversation` and wait for its answer, within
    `agent.timeout` seconds; `RemoteAgentError` saying why there is none."""
    try:
        async with asyncio.timeout(agent.timeout):
            return await _exchange(cards, agent, text, conversation, message_id)
    except TimeoutError:
        raise RemoteAgentError(agent.name, f"no final answer within {agent.timeout:g} s") from None


async def _exchange(
    cards: RemoteCards, agent: RemoteAgent, text: str, conversation: Conversation, message_id: str
) -> Answer:
    card = await cards.card(agent)
    message = Message(
        message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)],
        context_id=conversation.context_id, task_id=conversation.task_id,
    )  # fmt: skip
    request = SendMessageRequest(message=message)
    async with http_client(agent, cards.policy(), agent.timeout) as http:
        config = ClientConfig(
            httpx_client=http, streaming=True, supported_protocol_bindings=BINDINGS
        )
        try:
            client = ClientFactory(config).create(card)
        except ValueError as e:
            raise RemoteAgentError(agent.name, f"its card offers no interface to use: {e}") from e
        try:
            task: Task | None = None
            # Closed as soon as the task settles: the stream may go on (artifacts, a close).
            # (an async generator, which the SDK annotates as an iterator)
            stream = cast(AsyncGenerator[StreamResponse, None], client.send_message(request))
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    if event.HasField("message"):
                        return Answer(parts_text(event.message.parts), event.message.context_id)
                    task = _folded(task, event)
                    if task is not None and _settled(task):
                        break
            if task is None:
                raise RemoteAgentError(agent.name, "answered with neither a task nor a message")
            while not _settled(task):
                await asyncio.sleep(POLL_INTERVAL)
                task = await client.get_task(GetTaskRequest(id=task.id))
        except (EgressRefused, httpx.TransportError) as e:
            raise unreachable(agent, e) from e
        except A2AClientError as e:
            if isinstance(e.__cause__, httpx.RequestError):  # the SDK's word for a connection
                raise unreachable(agent, e) from e
            raise RemoteAgentError(agent.name, f"the request failed: {e}") from e
        except A2AError as e:
            raise RemoteAgentError(agent.name, f"refused the message: {e}") from e
        finally:
            await client.close()
    waiting = task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    return Answer(_task_answer(agent, task), task.context_id, task.id if waiting else "")


def _folded(task: Task | None, event: StreamResponse) -> Task | None:
    """The task as the stream has told it so far."""
    if event.HasField("task"):
        return event.task
    if task is None:
        task = Task()
    if event.HasField("status_update"):
        update = event.status_update
        task.id, task.context_id = update.task_id, update.context_id
        task.status.CopyFrom(update.status)
    elif event.HasField("artifact_update"):
        update = event.artifact_update
        task.id, task.context_id = update.task_id, update.context_id
        _add_artifact(task, update.artifact, append=update.append)
    return task


def _add_artifact(task: Task, artifact: Artifact, *, append: bool) -> None:
    for known in task.artifacts:
        if known.artifact_id == artifact.artifact_id:
            if not append:
                del known.parts[:]
            known.parts.extend(artifact.parts)
            return
    task.artifacts.append(artifact)


def _settled(task: Task) -> bool:
    return task.status.state in _DONE or task.status.state in _ENDED_BADLY


def _task_answer(agent: RemoteAgent, task: Task) -> str:
    state = task.status.state
    said = parts_text(task.status.message.parts) if task.status.HasField("message") else ""
    if state in _ENDED_BADLY:
        raise RemoteAgentError(
            agent.name, f"task {task.id} {_ENDED_BADLY[state]}" + (f": {said}" if said else "")
        )
    produced = "\n".join(parts_text(a.parts) for a in task.artifacts)
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        asked = said or produced or "(no question given)"
        return f"The remote agent needs more input to go on: {asked}"
    return produced or said


def parts_text(parts: Iterable[Part]) -> str:
    """What the model reads of a message's or artifact's parts."""
    shown: list[str] = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            shown.append(part.text)
        elif kind == "data":
            value = MessageToDict(part)["data"]
            shown.append(json.dumps(value, ensure_ascii=False))
        elif kind == "url":
            shown.append(f"[file {part.filename or part.url}: {part.url}]")
        elif kind == "raw":
            shown.append(f"[file {part.filename or 'unnamed'}, {part.media_type}, not shown]")
    return "\n".join(shown)
