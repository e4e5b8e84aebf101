"""Driving a code agent's thread: start queued runs and run `on_message` for each.

A run of a code agent is `run.started` and the request's messages, then `run.tick` and
`agent.started` (the handler begins), whatever the handler does (model, tool, reply and
state events), then the reply as the assistant's message, `agent.completed` and
`run.completed` with the reply as the result. An exception ends the run with `run.error`
(kind `internal_error`, or the model error's kind); a cancel cancels the handler's task. A
run found begun by a drive that is gone (its worker died) is resumed: its handler runs
again from the start against the run's record (`code_emitter.py`), and a handler that does
not repeat its record ends the run with `run.error` kind `interrupted`. An isolated
agent's handler runs in a sandboxed worker (`code_isolated.py`) with the same `ctx` effects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import structlog

from agency.contracts.events import (
    AgentCompleted,
    AgentStarted,
    AnyEvent,
    ChatMessage,
    MessageAppended,
    RunCompleted,
    RunError,
    RunTick,
)
from agency.contracts.events.blueprint import BlueprintSpec
from agency.contracts.limits import limits, truncate_text
from agency.domain.thread_state import RunView, ThreadState
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.code import SettingsError
from agency.services.agents.system import AgentSystem, CodeAgentSpec
from agency.services.agents.tools import StateTool, Tool
from agency.services.agents.tracebacks import located, where
from agency.services.llm.provider import ModelError, Provider
from agency.services.runtime.actions import next_action
from agency.services.runtime.code_context import FLUSH_SECONDS, Ai, CodeRunContext, Reply
from agency.services.runtime.code_emitter import Diverged, Emitter, journal_of
from agency.services.runtime.code_isolated import IsolatedAgentFailed, run_isolated
from agency.services.runtime.code_tools import Tools
from agency.services.runtime.failures import run_failed

log = structlog.get_logger(__name__)

_MAX_RUNS_PER_DRIVE = 200
_HANDLER_GRACE_SECONDS = 5.0
# A run is run (or resumed) at most this often per drive.
_RUNS_PER_DRIVE = 3
_END_WAIT_SECONDS = 3.0


def split_conversation(
    messages: tuple[ChatMessage, ...],
) -> tuple[tuple[ChatMessage, ...], ChatMessage]:
    """The conversation before the run's request, and its (last) user message."""
    end = len(messages)
    start = end
    while start > 0 and messages[start - 1].role != "assistant":
        start -= 1
    head = messages[:start]
    request = messages[start:]
    users = [m for m in request if m.role == "user"]
    message = users[-1] if users else ChatMessage(role="user", content="")
    return head + tuple(m for m in request if m is not message), message


class CodeDriver(Protocol):
    """What a code run needs of the thread driver (`loop.ThreadDriver`) that runs it."""

    @property
    def system(self) -> AgentSystem: ...

    async def append(
        self, state: ThreadState, events: Sequence[AnyEvent]
    ) -> tuple[ThreadState, bool]: ...

    async def reload(self, state: ThreadState) -> ThreadState: ...

    async def read_events(self, state: ThreadState) -> list[RecordedEvent]: ...

    async def dynamic_blueprints(self, state: ThreadState) -> dict[str, BlueprintSpec]: ...


class CodeRuns:
    """The code-agent half of `ThreadDriver`: one per driver."""

    def __init__(self, driver: CodeDriver, provider: Provider) -> None:
        self._driver = driver
        self._provider = provider
        # The handler task in flight per thread, so a cancel can abort it.
        self.inflight: dict[tuple[str, str], tuple[asyncio.Task[Any], Emitter]] = {}

    def abort(self, tenant_id: str, thread_id: str) -> bool:
        entry = self.inflight.get((tenant_id, thread_id))
        if entry is None or entry[0].done():
            return False
        task, emitter = entry
        emitter.aborted.set()
        task.cancel()
        return True

    async def settle(self, state: ThreadState, spec: CodeAgentSpec) -> ThreadState:
        """Start and run the thread's runs until none is waiting."""
        driver = self._driver
        ran: Counter[str] = Counter()
        for _ in range(_MAX_RUNS_PER_DRIVE):
            run = state.active_run
            if run is None:
                if not state.queue:
                    return state
                blueprint = driver.system.blueprints.get(spec.name)
                assert blueprint is not None
                action = next_action(state, blueprint, {})
                events = getattr(action, "events", ())
                state, _ = await driver.append(state, events)
                if state.agent_type != spec.name:
                    return state  # a queued run of another blueprint: its runner goes on
                continue
            if run.status != "running":
                return state
            if ran[run.run_id] >= _RUNS_PER_DRIVE:
                # Run here already and still not ended (its appends kept failing).
                error = "the run was interrupted: its handler could not record its end"
                state, _ = await driver.append(state, run_failed(state, "interrupted", error))
                continue
            ran[run.run_id] += 1
            # A run begun by a drive that is gone (its worker died) is resumed.
            state = await self._run(state, run, spec, resume=run.step > 0)
            state = await self._settled(state, run.run_id)
        return state

    async def _settled(self, state: ThreadState, run_id: str) -> ThreadState:
        """The state once the run's end is readable. A handler aborted by a cancel seen on
        the wire returns before the cancel can be read back (or before its append, which
        may lose a race and be made again, is stored): wait a little for it. A run still
        running after that is resumed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _END_WAIT_SECONDS
        wait = 0.02
        while (run := state.run(run_id)) is not None and run.status == "running":
            if loop.time() > deadline:
                break
            await asyncio.sleep(wait)
            wait = min(wait * 2, 0.25)
            state = await self._driver.reload(state)
        return state

    async def _settings(self, state: ThreadState, spec: CodeAgentSpec) -> Any:
        dynamic = await self._driver.dynamic_blueprints(state)
        return spec.settings_for(dynamic.get(spec.name))

    async def _run(
        self, state: ThreadState, run: RunView, spec: CodeAgentSpec, *, resume: bool
    ) -> ThreadState:
        driver = self._driver
        run_id = run.run_id
        try:
            settings = await self._settings(state, spec)
        except SettingsError as e:
            state, _ = await driver.append(state, run_failed(state, "invalid_settings", str(e)))
            return state
        model = spec.cls.model or driver.system.default_model
        if isinstance(getattr(settings, "model", None), str) and settings.model:
            model = settings.model
        if resume:
            journal, begun_with = journal_of(await driver.read_events(state), run_id)
            emitter = Emitter(driver.append, state, run_id, journal=journal, agent_state=begun_with)
        else:
            emitter = Emitter(driver.append, state, run_id, agent_state=state.agent_state)
        conversation, message = split_conversation(state.messages)
        blueprint = driver.system.blueprints[spec.name]
        chosen = {
            name: tool
            for name, tool in driver.system.tools_for(blueprint).items()
            if isinstance(tool, Tool | StateTool)
        }
        tools = Tools(emitter, driver.reload, chosen)
        ai = Ai(
            emitter,
            self._provider,
            model,
            lambda: [*conversation, message],
            tools,
            tenant=state.tenant_id,
            agency=state.agency_id,
        )
        reply = Reply(emitter)
        ctx = CodeRunContext(
            thread_id=state.thread_id,
            run_id=run_id,
            agent_type=spec.name,
            settings=settings,
            conversation=conversation,
            ai=ai,
            tools=tools,
            reply=reply,
            _emitter=emitter,
        )
        if not resume:
            started = AgentStarted(
                run_id=run_id, agent_type=spec.name, model=f"code:{spec.cls.__name__}"
            )
            await emitter.emit([RunTick(run_id=run_id, step=1), started])
        key = (state.tenant_id, state.thread_id)
        handler = (
            run_isolated(spec, message, ctx)
            if spec.isolation is not None
            else spec.cls().on_message(message, ctx)
        )
        task = asyncio.ensure_future(handler)
        self.inflight[key] = (task, emitter)
        flusher = asyncio.ensure_future(_flush_every(emitter, task))
        try:
            returned = await _await_handler(task, emitter)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return await driver.reload(emitter.state)
        except Diverged as e:
            return await self._fail(emitter, "interrupted", str(e), agent_error=True)
        except ModelError as e:
            return await self._fail(emitter, e.kind or "model_error", f"model call failed: {e}")
        except IsolatedAgentFailed as e:
            log.warning("isolated code agent failed", run_id=run_id, error=str(e))
            return await self._fail(emitter, "internal_error", str(e), agent_error=True)
        except Exception as e:  # the reason says where in the app's code it raised
            log.warning("code agent raised", run_id=run_id, raised_at=where(e), exc_info=e)
            return await self._fail(emitter, "internal_error", located(e), agent_error=True)
        finally:
            self.inflight.pop(key, None)
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        if isinstance(returned, str) and returned:
            reply.write(returned)
        text = truncate_text(reply.text, limits().max_message_bytes)
        final: list[AnyEvent] = []
        if text:
            final.append(
                MessageAppended(run_id=run_id, message=ChatMessage(role="assistant", content=text))
            )
        final += [
            AgentCompleted(run_id=run_id, result=text),
            RunCompleted(run_id=run_id, result=text),
        ]
        try:
            return await emitter.emit(final)
        except Diverged as e:
            return await self._fail(emitter, "interrupted", str(e), agent_error=True)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return await driver.reload(emitter.state)

    async def _fail(
        self, emitter: Emitter, kind: str, error: str, *, agent_error: bool = False
    ) -> ThreadState:
        """End the run with `run.error` (after what the handler had written)."""
        run_id = emitter.run_id
        emitter.journal.clear()  # the end is new, whatever the record held
        events: list[AnyEvent] = [RunError(run_id=run_id, error=error, kind=kind)]
        if agent_error:
            events = [*run_failed(emitter.state, kind, error)] or events
        try:
            return await emitter.emit(events)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return await self._driver.reload(emitter.state)


async def _await_handler(task: asyncio.Future[Any], emitter: Emitter) -> Any:
    # `wait`, not `await task`: a cancel of this drive must reach the handler only after
    # `aborted` is set, so the handler sees why it stops.
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        if not task.done():  # this drive was cancelled (shutdown, or its lease lost)
            emitter.aborted.set()
            task.cancel()
            # Let it run its cleanup (bounded: a handler that ignores cancels is left).
            await asyncio.wait({task}, timeout=_HANDLER_GRACE_SECONDS)
        raise
    return task.result()


async def _flush_every(emitter: Emitter, handler: asyncio.Future[Any]) -> None:
    """Append buffered reply events every `FLUSH_SECONDS`; an abort or failure here stops
    the handler (its next effect would fail the same way)."""
    flush: Callable[[], Awaitable[ThreadState]] = emitter.emit
    while True:
        await asyncio.sleep(FLUSH_SECONDS)
        if not emitter.pending or emitter.journal:
            continue  # a resumed handler's reply is matched at its next effect
        try:
            await flush()
        except asyncio.CancelledError:
            if emitter.aborted.is_set():
                handler.cancel()
            raise
        except Exception:
            log.warning("code agent reply could not be appended", exc_info=True)
            handler.cancel()
            return
