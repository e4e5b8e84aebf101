"""What the A2A methods do, whichever binding carries them: one blueprint of one agency is
the agent; a context is one of its threads, a task one run (`tasks.py`).

A message without `taskId` starts a run on its context's thread (a new thread without
`contextId`); its `messageId` is the run's idempotency key, so a retried message is the
same task. A message on a task awaiting input (an approval) decides it. Another tenant's
context or task, or another blueprint's, is not found.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, Awaitable, Callable

from litestar.exceptions import HTTPException, NotFoundException

from agency.contracts.commands import ApproveToolCalls, CancelRun
from agency.contracts.events import ChatMessage, HitlResume, RunCanceled
from agency.contracts.events.thread import end_user_problem
from agency.contracts.ids import derived_id
from agency.infra.jetstream.records import RecordedEvent
from agency.services.a2a.tasks import RunTask, ThreadTasks, split_task_id
from agency.services.a2a.wire import (
    FINAL_STATES,
    TERMINAL_STATES,
    Message,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
)
from agency.services.api.a2a import push
from agency.services.api.a2a.agent import Agent
from agency.services.api.a2a.errors import (
    A2AError,
    ContentTypeNotSupported,
    InvalidParams,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
)
from agency.services.api.approval import Approval
from agency.services.api.auth import require_agent_type, thread_created, thread_terminated
from agency.services.api.deps import ApiDeps
from agency.services.api.idempotency import run_id_for
from agency.services.api.run_start import attempt_on, start_run
from agency.services.api.streaming import ThreadFeed
from agency.services.api.thread_create import END_USER_FIELD, create_root_thread

# How long a blocking SendMessage waits for its task to end or ask for input; past it, the
# task is answered as it is (the client follows it with GetTask or SubscribeToTask).
BLOCKING_SECONDS = 120.0
# How long a cancel waits for the run to be canceled before answering the task as it is.
CANCEL_SECONDS = 10.0
# The message id is the run's idempotency key: what an `Idempotency-Key` may be.
_MESSAGE_ID = re.compile(r"^[\x21-\x7e]{1,200}$")
_APPROVE = frozenset({"approve", "approved", "yes", "y", "ok"})
_REJECT = frozenset({"reject", "rejected", "no", "n", "deny"})


async def agent_for(
    deps: ApiDeps, tenant: str, agency_id: str, blueprint: str, closing: asyncio.Event
) -> Agent:
    """The agent, or 404 (`NotFoundException`) if the tenant has no such agency or blueprint."""
    await require_agent_type(deps, tenant, agency_id, blueprint)
    return Agent(deps, tenant, agency_id, blueprint, closing)


async def require_context(agent: Agent, thread_id: str) -> None:
    """The thread is this agent's: the tenant's, in the agency, of the blueprint."""
    try:
        created = await thread_created(agent.deps, agent.tenant, agent.agency_id, thread_id)
    except (NotFoundException, HTTPException) as e:
        raise TaskNotFound(thread_id, "context") from e
    if created.agent_type != agent.blueprint:
        raise TaskNotFound(thread_id, "context")


async def _read_task(agent: Agent, value: str) -> tuple[ThreadFeed, ThreadTasks, RunTask]:
    """The task's thread followed (its stored events folded), and the task."""
    ids = split_task_id(value)
    if ids is None:
        raise TaskNotFound(value)
    thread_id, run_id = ids
    await require_context(agent, thread_id)
    feed = agent.feed(thread_id)
    tasks = ThreadTasks(thread_id)
    for event in await feed.backfill():
        tasks.apply(event)
    run = tasks.get(run_id)
    if run is None:
        await feed.aclose()
        raise TaskNotFound(value)
    return feed, tasks, run


async def require_task(agent: Agent, value: str) -> RunTask:
    """The task as the log has it now, or `TaskNotFound`."""
    feed, _, run = await _read_task(agent, value)
    await feed.aclose()
    return run


async def get_task(agent: Agent, value: str, history_length: int | None) -> Task:
    feed, _, run = await _read_task(agent, value)
    await feed.aclose()
    return run.task(history_length)


def _text(message: Message) -> str:
    """The message's text parts (and data parts, as JSON) as one text."""
    texts: list[str] = []
    for part in message.parts:
        if part.text is not None:
            texts.append(part.text)
        elif part.data is not None:
            texts.append(json.dumps(part.data))
        else:
            raise ContentTypeNotSupported(
                "only text and data parts are accepted; files (raw or url parts) are not"
            )
    return "\n".join(texts)


def _checked(message: Message) -> Message:
    if not message.message_id:
        raise InvalidParams("message.messageId is required")
    if not _MESSAGE_ID.fullmatch(message.message_id):
        raise InvalidParams(
            "message.messageId must be 1 to 200 printable ASCII characters without spaces "
            "(a UUID, say)"
        )
    if message.role not in ("ROLE_USER", "ROLE_UNSPECIFIED"):
        raise InvalidParams(f"message.role must be ROLE_USER, not {message.role}")
    if not message.parts:
        raise InvalidParams("message.parts must hold at least one part")
    return message


async def send(agent: Agent, request: SendMessageRequest) -> AsyncGenerator[StreamResponse, None]:
    """SendStreamingMessage: the task first, then its changes until it ends or awaits
    input. `send_blocking` is the same, answered once."""
    message = _checked(request.message)
    config = request.configuration
    push_config = config.task_push_notification_config if config is not None else None
    if message.task_id:
        feed, tasks, run = await _read_task(agent, message.task_id)
        return await _streamed(feed, tasks, _continued(agent, feed, run, message, push_config))
    text = _text(message)  # refused before a thread is made for it
    thread_id = await _thread_for(
        agent, message.context_id, message.message_id, _end_user(request, message)
    )
    if await thread_terminated(agent.deps, agent.tenant, thread_id) is not None:
        raise UnsupportedOperation(f"context {thread_id} is terminated: it takes no more tasks")
    await agent.deps.limiter.admit(agent.deps.pool, agent.tenant, thread_id)
    # A message refused for a limit is sent again as its id's next attempt (`run_start`).
    key = attempt_on(await agent.deps.threads.load(agent.tenant, thread_id), message.message_id)
    if push_config is not None:  # configured first, so its task's every change is POSTed
        run_id = run_id_for(agent.tenant, thread_id, key)
        await push.configure(agent, RunTask(thread_id, run_id), push_config)
    feed = agent.feed(thread_id)
    return await _streamed(
        feed, ThreadTasks(thread_id), _started(agent, feed, thread_id, key, text)
    )


async def _continued(
    agent: Agent,
    feed: ThreadFeed,
    run: RunTask,
    message: Message,
    push_config: TaskPushNotificationConfig | None,
) -> str:
    """A message on the task `run`: its decision sent; the run id."""
    if message.context_id and message.context_id != run.thread_id:
        raise InvalidParams(
            f"task {run.id} is of context {run.thread_id}, not {message.context_id[:80]}"
        )
    if push_config is not None:
        await push.configure(agent, run, push_config)
    await _answer(agent, feed, run, message)
    return run.run_id


async def _started(agent: Agent, feed: ThreadFeed, thread_id: str, key: str, text: str) -> str:
    """The task's run asked for under `key` (the message's id, or its attempt); its id."""
    started = await start_run(
        agent.deps, agent.tenant, agent.agency_id, thread_id, key,
        (ChatMessage(role="user", content=text),), {}, "queue", feed=feed,
    )  # fmt: skip
    return started.run_id


async def _streamed(
    feed: ThreadFeed, tasks: ThreadTasks, begun: Awaitable[str]
) -> AsyncGenerator[StreamResponse, None]:
    """The task's changes, once `begun` gave its run id and the log is read so far; the
    feed is closed if either fails."""
    try:
        run_id = await begun
        for event in await feed.backfill():
            tasks.apply(event)
    except BaseException:
        await feed.aclose()
        raise
    return _follow(feed, tasks, run_id)


async def send_blocking(agent: Agent, request: SendMessageRequest) -> Task:
    """SendMessage: the task once it ended or awaits input (or as it is after a while, or
    at once with `returnImmediately`), read from the log as GetTask reads it."""
    config = request.configuration
    history = config.history_length if config is not None else None
    if history is not None and history < 0:
        raise InvalidParams("configuration.historyLength must not be negative")
    events = await send(agent, request)
    try:
        first = await anext(events)
        assert first.task is not None, "a task's stream begins with the task"
        task_id = first.task.id
        if config is None or not config.return_immediately:
            async with asyncio.timeout(BLOCKING_SECONDS):
                async for _ in events:
                    pass
    except TimeoutError:
        pass
    finally:
        await events.aclose()
    return await get_task(agent, task_id, history)


def _end_user(request: SendMessageRequest, message: Message) -> str | None:
    """The end user a new context's thread is created for (docs/data.md, "End users"):
    `metadata.endUserId` of the message, else of the request; invalid params if malformed."""
    for metadata in (message.metadata, request.metadata):
        given = (metadata or {}).get(END_USER_FIELD)
        if given is None:
            continue
        if not isinstance(given, str) or (problem := end_user_problem(given)) is not None:
            raise InvalidParams(f"metadata.{END_USER_FIELD} {problem or 'must be a string'}")
        return given
    return None


async def _thread_for(
    agent: Agent, context_id: str | None, message_id: str, end_user: str | None = None
) -> str:
    """The context's thread: the one named, or a new one of the blueprint (for `end_user`,
    when given). A context the client names and the tenant has not used yet is the new
    thread's id; without one, the id derives from the message's, so the same message sent
    again finds the same thread (and its run, the same task)."""
    thread_id = context_id or derived_id(
        "a2a_", agent.tenant, agent.agency_id, agent.blueprint, message_id
    )
    try:
        created = await thread_created(agent.deps, agent.tenant, None, thread_id)
    except NotFoundException:
        created = None
    except HTTPException as e:
        raise InvalidParams(f"contextId: {e.detail}") from e
    if created is not None:
        if created.agency_id != agent.agency_id or created.agent_type != agent.blueprint:
            raise TaskNotFound(thread_id, "context")
        return thread_id
    try:
        await create_root_thread(
            agent.deps, agent.tenant, agent.agency_id, thread_id, agent.blueprint,
            {"via": "a2a"}, listed=False, end_user_id=end_user,
        )  # fmt: skip
    except HTTPException as e:
        if e.status_code != 409:  # created by the same message, sent twice at once
            raise InvalidParams(f"contextId {thread_id[:80]!r}: {e.detail}") from e
    return thread_id


async def _answer(agent: Agent, feed: ThreadFeed, run: RunTask, message: Message) -> None:
    """A message on a task awaiting input: the decision on the calls its run paused for."""
    if run.state != "TASK_STATE_INPUT_REQUIRED":
        state = run.state.removeprefix("TASK_STATE_").lower()
        ended = " and takes no more messages" if run.state in TERMINAL_STATES else ""
        raise UnsupportedOperation(
            f"task {run.id} is {state}{ended}: only a task awaiting input takes a message; "
            "send one without taskId (with this contextId) to start another task"
        )
    approved, reason = _decision(message)
    command = Approval(approved, reason=reason).command(agent.agency_id, run.thread_id, run.run_id)
    key = f"a2a:{message.message_id}"
    await _send_and_see(agent, feed, command, key, lambda e: isinstance(e.payload, HitlResume))


def _decision(message: Message) -> tuple[bool, str]:
    for part in message.parts:
        if isinstance(part.data, dict) and isinstance(part.data.get("approved"), bool):
            reason = part.data.get("reason", "")
            return part.data["approved"], reason if isinstance(reason, str) else ""
    text = _text(message).strip()
    word, _, rest = text.partition(" ")
    word = word.strip(".,:;!").lower()
    if word in _APPROVE:
        return True, ""
    if word in _REJECT:
        return False, rest.strip()
    raise InvalidParams(
        "the task awaits approval: answer 'approve' or 'reject' (a reason may follow), or a "
        'data part {"approved": true|false, "reason": "..."}'
    )


async def _send_and_see(
    agent: Agent,
    feed: ThreadFeed,
    command: ApproveToolCalls | CancelRun,
    key: str,
    seen: Callable[[RecordedEvent], bool],
    timeout: float | None = None,
) -> None:
    """Send the command once the feed follows the thread; wait (bounded) for its event."""
    await feed.catch_up()
    await agent.deps.bus.commands.send(
        agent.tenant, command, idempotency_key=f"{command.thread_id}:{key}"
    )
    run_id = command.run_id
    await feed.until(
        lambda events: next(
            (e for e in events if getattr(e.payload, "run_id", None) == run_id and seen(e)), None
        ),
        timeout if timeout is not None else agent.deps.settings.read_your_writes_timeout,
    )


async def cancel(agent: Agent, value: str) -> Task:
    feed, tasks, run = await _read_task(agent, value)
    try:
        if run.state in TERMINAL_STATES:
            state = run.state.removeprefix("TASK_STATE_").lower()
            raise TaskNotCancelable(f"task {run.id} is {state}: it cannot be canceled")
        command = CancelRun(
            agency_id=agent.agency_id, thread_id=run.thread_id, reason="canceled over A2A",
            run_id=run.run_id,
        )  # fmt: skip
        await _send_and_see(
            agent, feed, command, f"a2a-cancel:{run.run_id}",
            lambda e: isinstance(e.payload, RunCanceled) or e.type == "run.completed"
            or e.type == "run.error", CANCEL_SECONDS,
        )  # fmt: skip
        for event in await feed.backfill():
            tasks.apply(event)
    finally:
        await feed.aclose()
    return run.task()


async def subscribe(agent: Agent, value: str) -> AsyncGenerator[StreamResponse, None]:
    feed, tasks, run = await _read_task(agent, value)
    if run.state in TERMINAL_STATES:
        await feed.aclose()
        state = run.state.removeprefix("TASK_STATE_").lower()
        raise UnsupportedOperation(f"task {run.id} is {state}: there is nothing to subscribe to")
    return _follow(feed, tasks, run.run_id)


async def _follow(
    feed: ThreadFeed, tasks: ThreadTasks, run_id: str
) -> AsyncGenerator[StreamResponse, None]:
    """The task as it is, then its changes as the log stores them, until it ends or awaits
    input; the feed is closed at the end, however the stream ends."""
    try:
        run = tasks.runs.setdefault(run_id, RunTask(tasks.thread_id, run_id))
        yield StreamResponse(task=run.task())
        if run.state in FINAL_STATES:
            return
        async for batch in feed.live():
            for event in batch:
                for change in tasks.apply(event):
                    if change.task.run_id != run_id:
                        continue
                    if change.kind == "artifact":
                        yield change.task.artifact_event()
                        continue
                    yield change.task.status_event()
                    if change.task.state in FINAL_STATES:
                        return
    finally:
        await feed.aclose()


def a2a_error(e: HTTPException) -> A2AError:
    """An HTTP refusal from the API's own checks, as the protocol's error."""
    detail = str(e.detail)
    if e.status_code in (400, 404, 413, 422):
        return InvalidParams(detail)
    return UnsupportedOperation(f"{detail} (HTTP {e.status_code})")
