"""The agency operations an MCP client can call: typed inputs, typed answers.

Each tool goes through the HTTP API's own routes (the typed client, over an in-process
transport, with the caller's credential), so a tool call is checked, authorised and
answered exactly as the same HTTP request would be. Waiting on a run reads the thread's
log (`run_outcome`), as the invoke route does. Names are camelCase, as everywhere on HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

import msgspec

from agency.contracts.errors import InvalidToken
from agency.contracts.events.thread import ConcurrencyStrategy
from agency.contracts.http import TerminateAccepted, ThreadOut
from agency.contracts.ids import validate_token
from agency.projections import agency_queries, state_queries
from agency.services.api.deps import ApiDeps
from agency.services.api.idempotency import IdempotencyKey
from agency.services.api.run_outcome import Progress, RunOutcome, log_position, wait_for_outcome
from agency.services.client import AsyncAgencyClient
from agency.services.client.calls import BlueprintInfo

# How long invoke, approve and cancel wait for the run by default, and at most. A wait
# that runs out is no error: the answer says where the run stands (`get_state` follows).
DEFAULT_WAIT = 60.0
MAX_WAIT = 300.0

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
WaitSeconds = Annotated[
    float,
    msgspec.Meta(
        ge=0,
        le=MAX_WAIT,
        description="How long to wait for the run to end or to need an approval; "
        "0 answers at once.",
    ),
]


class ToolInput(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"
):
    """A tool's arguments: camelCase, unknown ones refused."""


class NoInput(ToolInput, frozen=True, kw_only=True):
    pass


class AgencyInput(ToolInput, frozen=True, kw_only=True):
    agency_id: Id


class CreateThreadInput(AgencyInput, frozen=True, kw_only=True):
    agent_type: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    metadata: dict[str, str] = {}


class ThreadInput(AgencyInput, frozen=True, kw_only=True):
    thread_id: Id


class InvokeInput(ThreadInput, frozen=True, kw_only=True):
    message: str
    idempotency_key: IdempotencyKey | None = None
    strategy: ConcurrencyStrategy = "queue"
    wait_seconds: WaitSeconds = DEFAULT_WAIT


class ApproveInput(ThreadInput, frozen=True, kw_only=True):
    approved: bool = True
    reason: str = ""
    run_id: Id | None = None
    wait_seconds: WaitSeconds = DEFAULT_WAIT


class CancelInput(ThreadInput, frozen=True, kw_only=True):
    reason: str = ""
    run_id: Id | None = None
    wait_seconds: WaitSeconds = 10.0


class TerminateInput(ThreadInput, frozen=True, kw_only=True):
    reason: Annotated[str, msgspec.Meta(max_length=2000)] = ""


class Agencies(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    agencies: list[agency_queries.AgencyView]


class Blueprints(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    blueprints: list[BlueprintInfo]


class InvalidArguments(Exception):
    """A tool's arguments are not what its schema says: the message says what is wrong."""


@dataclass(eq=False)
class Operations:
    """The tools' work for one caller: `client` calls the API as that caller."""

    client: AsyncAgencyClient
    deps: ApiDeps
    tenant: str
    stop: asyncio.Event
    progress: Progress | None = None

    async def list_agencies(self, _: NoInput) -> Agencies:
        return Agencies(agencies=await self.client.list_agencies())

    async def list_blueprints(self, args: AgencyInput) -> Blueprints:
        return Blueprints(blueprints=await self.client.list_blueprints(args.agency_id))

    async def create_thread(self, args: CreateThreadInput) -> ThreadOut:
        return await self.client.create_thread(args.agency_id, args.agent_type, args.metadata)

    async def get_state(self, args: ThreadInput) -> state_queries.ThreadStateView:
        return await self.client.state(args.agency_id, args.thread_id)

    async def invoke_and_wait(self, args: InvokeInput) -> RunOutcome:
        accepted = await self.client.invoke(
            args.agency_id,
            args.thread_id,
            args.message,
            idempotency_key=args.idempotency_key,
            strategy=args.strategy,
        )
        return await self._wait(args.thread_id, accepted.run_id, args.wait_seconds, since=0)

    async def approve(self, args: ApproveInput) -> RunOutcome:
        # Only an approval asked for after this point answers the wait: the one being
        # decided is already in the log.
        since = await log_position(self.deps, self.tenant, _token("threadId", args.thread_id))
        answer = await self.client.approve(
            args.agency_id, args.thread_id, args.approved, reason=args.reason, run_id=args.run_id
        )
        return await self._wait(args.thread_id, answer.run_id, args.wait_seconds, since)

    async def cancel(self, args: CancelInput) -> RunOutcome:
        since = await log_position(self.deps, self.tenant, _token("threadId", args.thread_id))
        answer = await self.client.cancel(
            args.agency_id, args.thread_id, args.reason, run_id=args.run_id
        )
        # No run of its own was active: the cancel reached its subagents' runs; the
        # outcome is the thread's last run's.
        run_id = answer.run_id or await self._last_run(args.thread_id)
        return await self._wait(args.thread_id, run_id, args.wait_seconds, since)

    async def terminate(self, args: TerminateInput) -> TerminateAccepted:
        return await self.client.terminate(args.agency_id, args.thread_id, args.reason)

    async def _last_run(self, thread_id: str) -> str:
        last = (await self.deps.threads.load(self.tenant, thread_id)).last_run
        if last is None:
            raise InvalidArguments(f"thread {thread_id} has no run")
        return last.run_id

    async def _wait(self, thread_id: str, run_id: str, timeout: float, since: int) -> RunOutcome:
        return await wait_for_outcome(
            self.deps,
            self.tenant,
            thread_id,
            run_id,
            timeout,
            since=since,
            stop=self.stop,
            progress=self.progress,
        )


def _token(name: str, value: str) -> str:
    try:
        return validate_token(name, value)
    except InvalidToken as e:
        raise InvalidArguments(str(e)) from e


In = TypeVar("In", bound=ToolInput)
Out = TypeVar("Out", bound=msgspec.Struct)


@dataclass(frozen=True, slots=True)
class AgencyTool(Generic[In, Out]):
    name: str
    title: str
    description: str
    input: type[In]
    output: type[Out]
    run: Callable[[Operations, In], Awaitable[Out]]
    read_only: bool = False

    def arguments(self, raw: dict[str, Any] | None) -> In:
        try:
            return msgspec.convert(raw or {}, self.input, strict=True)
        except msgspec.ValidationError as e:
            raise InvalidArguments(f"invalid arguments for {self.name}: {e}") from e


_RUN_ANSWER = (
    " Answers the run's status (`completed`, `paused`, `error`, …), its last assistant "
    "message, and the tool calls it waits on you to approve (`pendingApproval`, then call "
    "`approve`). If the wait runs out first the status says where the run is: call "
    "`get_state` later."
)

TOOLS: tuple[AgencyTool[Any, Any], ...] = (
    AgencyTool(
        "list_agencies",
        "List agencies",
        "The agencies of your tenant: their ids are the `agencyId` of every other tool.",
        NoInput,
        Agencies,
        Operations.list_agencies,
        read_only=True,
    ),
    AgencyTool(
        "list_blueprints",
        "List blueprints",
        "The blueprints (agent types) a thread of this agency can be created with.",
        AgencyInput,
        Blueprints,
        Operations.list_blueprints,
        read_only=True,
    ),
    AgencyTool(
        "create_thread",
        "Create a thread",
        "Create a thread (a conversation with one agent) of the given blueprint "
        "(`agentType`, see `list_blueprints`).",
        CreateThreadInput,
        ThreadOut,
        Operations.create_thread,
    ),
    AgencyTool(
        "invoke_and_wait",
        "Send a message and wait",
        "Send a user message to the thread and wait (up to `waitSeconds`) until the run it "
        "starts ends or needs an approval. With `idempotencyKey`, a repeated call starts no "
        "second run." + _RUN_ANSWER,
        InvokeInput,
        RunOutcome,
        Operations.invoke_and_wait,
    ),
    AgencyTool(
        "get_state",
        "Get a thread's state",
        "The thread's messages, files, todos, pending tool calls and current run.",
        ThreadInput,
        state_queries.ThreadStateView,
        Operations.get_state,
        read_only=True,
    ),
    AgencyTool(
        "approve",
        "Approve or reject tool calls",
        "Approve (or, with `approved: false`, reject) the tool calls a paused run waits on, "
        "then wait (up to `waitSeconds`) for the run to go on." + _RUN_ANSWER,
        ApproveInput,
        RunOutcome,
        Operations.approve,
    ),
    AgencyTool(
        "cancel",
        "Cancel the run",
        "Cancel the thread's active run (or `runId`) and its subagents, and wait (up to "
        "`waitSeconds`) until it has stopped.",
        CancelInput,
        RunOutcome,
        Operations.cancel,
    ),
    AgencyTool(
        "terminate",
        "Terminate the thread",
        "Shut the thread down for good: its active run ends canceled (reason `terminated`) "
        "with its subagents, and every later invoke is refused. Answers `terminating`, or "
        "`terminated` when it already was.",
        TerminateInput,
        TerminateAccepted,
        Operations.terminate,
    ),
)
