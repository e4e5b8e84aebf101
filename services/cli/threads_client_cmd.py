"""`agency threads ls|create|invoke|approve|cancel|terminate`: threads over the HTTP API,
through the Python client (`services.client`), against the running system's API and key."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, TypeVar

from agency.services.cli.agencies import DEFAULT_AGENCY, ensure_default_agency
from agency.services.cli.arguments import add_data_dir, running_endpoints

if TYPE_CHECKING:
    from agency.contracts.http import AgencyDeletion, EndUserForgetting, EventView, ThreadDeletion
    from agency.services.client import AsyncAgencyClient

# An erasure's answer (`ThreadDeletion`, `AgencyDeletion`, `EndUserForgetting`).
Erased = TypeVar("Erased")

# Exit codes of `invoke --follow` by how the run ended: done or waiting for a person is a
# success; an error, a cancel or a refusal is not.
_EXIT = {"completed": 0, "paused": 0, "error": 1, "canceled": 1, "rejected": 1}


def register(threads: Any) -> None:
    """Add the client commands to the `threads` group's subparsers."""
    ls = threads.add_parser("ls", help="list threads")
    ls.add_argument("--agency", default=None, help="only this agency's threads")
    ls.set_defaults(handler=threads_ls)

    create = threads.add_parser("create", help="create a thread (and start a run with --message)")
    create.add_argument("agent_type", help="the blueprint the thread runs")
    create.add_argument("--agency", default=None, help=f"agency id (default: {DEFAULT_AGENCY!r})")
    create.add_argument("--message", default=None, help="start its first run with this message")
    create.add_argument("--follow", action="store_true", help="show that run live until it ends")
    create.add_argument("--key", default=None, help="idempotency key of that run")
    create.set_defaults(handler=threads_create)

    invoke = threads.add_parser("invoke", help="start a run with a message")
    invoke.add_argument("thread", help="thread id")
    invoke.add_argument("message", help="the user message")
    invoke.add_argument("--follow", action="store_true", help="show the run live until it ends")
    invoke.add_argument("--key", default=None, help="idempotency key")
    invoke.add_argument(
        "--strategy", choices=("queue", "reject", "interrupt"), default="queue",
        help="when the thread already runs: wait, refuse, or cancel the running one",
    )  # fmt: skip
    invoke.set_defaults(handler=threads_invoke)

    approve = threads.add_parser("approve", help="approve (or --reject) the calls a run awaits")
    approve.add_argument("thread", help="thread id")
    approve.add_argument("--reject", action="store_true", help="reject the calls instead")
    approve.add_argument("--reason", default="", help="why, for the model")
    approve.add_argument(
        "--follow", action="store_true", help="show the run live from there until it ends"
    )
    approve.set_defaults(handler=threads_approve)

    cancel = threads.add_parser("cancel", help="cancel the thread's run")
    cancel.add_argument("thread", help="thread id")
    cancel.add_argument("--reason", default="", help="why")
    cancel.set_defaults(handler=threads_cancel)
    terminate = threads.add_parser("terminate", help="shut the thread down for good")
    terminate.add_argument("thread", help="thread id")
    terminate.add_argument("--reason", default="", help="why")
    terminate.set_defaults(handler=threads_terminate)

    delete = threads.add_parser(
        "delete", help="erase the thread and its subagent tree for good (docs/data.md)"
    )
    delete.add_argument("thread", help="thread id")
    delete.set_defaults(handler=threads_delete)

    for command in (ls, create, invoke, approve, cancel, terminate, delete):
        command.add_argument("--json", action="store_true", help="print answers as JSON")
        add_data_dir(command)


def _client(args: argparse.Namespace) -> AsyncAgencyClient:
    from agency.services.client import AsyncAgencyClient

    endpoints = running_endpoints(args)
    if not endpoints.api_url or not endpoints.api_key:
        raise ApiUnavailable("the running system has no API; start it with `agency up`")
    return AsyncAgencyClient(endpoints.api_url, endpoints.api_key)


class ApiUnavailable(Exception):
    pass


async def _run(args: argparse.Namespace, body: Any) -> int:
    from agency.services.client import ApiError

    try:
        async with _client(args) as client:
            code: int = await body(client)
            return code
    except (ApiError, ApiUnavailable) as e:
        print(f"agency: {e}", file=sys.stderr)
        return 1


async def _thread_agency(client: AsyncAgencyClient, thread_id: str) -> str:
    thread = await client.find_thread(thread_id)
    if thread is None:
        raise ApiUnavailable(f"no thread {thread_id} in any agency of this tenant")
    return thread.agency_id


def _print(args: argparse.Namespace, value: Any, text: str) -> None:
    print(json.dumps(_builtins(value), indent=2) if args.json else text)


def _builtins(value: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(value)


async def threads_ls(args: argparse.Namespace) -> int:
    async def body(client: AsyncAgencyClient) -> int:
        agencies = [args.agency] if args.agency else [a.id for a in await client.list_agencies()]
        threads = [t for agency in agencies for t in await client.list_threads(agency)]
        lines = [
            f"{t.id}  {t.agency_id}  {t.agent_type:<16} {t.status:<10} runs {t.run_count}"
            for t in threads
        ]
        _print(args, threads, "\n".join(lines) or "no threads")
        return 0

    return await _run(args, body)


async def threads_create(args: argparse.Namespace) -> int:
    if args.message is None and (args.follow or args.key is not None):
        print("agency: --follow and --key go with --message, the run it starts", file=sys.stderr)
        return 2

    async def body(client: AsyncAgencyClient) -> int:
        agency = args.agency or await ensure_default_agency(client)
        if args.message is None:
            thread = await client.create_thread(agency, args.agent_type)
            _print(args, thread, thread.id)
            return 0
        thread = await client.create_thread(
            agency, args.agent_type, text=args.message, idempotency_key=args.key
        )
        if thread.run_id is None or not args.follow:
            _print(args, thread, f"{thread.id} {thread.run_id} {thread.run_status}")
            return 0
        print(thread.id, flush=True)
        args.thread = thread.id
        return await _follow(
            client, args, agency, thread.run_id, from_seq=0, status=thread.run_status or "running"
        )

    return await _run(args, body)


async def threads_invoke(args: argparse.Namespace) -> int:
    async def body(client: AsyncAgencyClient) -> int:
        agency = await _thread_agency(client, args.thread)
        run = await client.invoke(
            agency, args.thread, args.message, idempotency_key=args.key, strategy=args.strategy
        )
        if not args.follow:
            _print(args, run, f"{run.run_id} {run.status}")
            return 0
        return await _follow(client, args, agency, run.run_id, from_seq=0, status=run.status)

    return await _run(args, body)


async def _follow(
    client: AsyncAgencyClient,
    args: argparse.Namespace,
    agency: str,
    run_id: str,
    *,
    from_seq: int,
    status: str = "running",
) -> int:
    """Print the run's events from `from_seq` until it ends or pauses; its exit code."""
    from agency.services.client.calls import RUN_STATUS_OF

    printer = EventPrinter(as_json=args.json)
    async with aclosing(client.follow(agency, args.thread, run_id, from_seq)) as events:
        async for event in events:
            printer(event)
            status = RUN_STATUS_OF.get(event.type, status)
    return _EXIT.get(status, 0)


async def _last_pause(client: AsyncAgencyClient, agency: str, thread: str) -> int:
    """The seq of the thread's last `run.paused` (0 if none): where an approval resumes."""
    last, from_seq = 0, 0
    while True:
        page = await client.events(agency, thread, from_seq, limit=500, types=["run.paused"])
        if page.events:
            last = page.events[-1].seq
            from_seq = last + 1
        if not page.has_more:
            return last


async def threads_approve(args: argparse.Namespace) -> int:
    async def body(client: AsyncAgencyClient) -> int:
        agency = await _thread_agency(client, args.thread)
        paused_at = await _last_pause(client, agency, args.thread) if args.follow else 0
        answer = await client.approve(agency, args.thread, not args.reject, reason=args.reason)
        _print(args, answer, "rejected" if args.reject else "approved")
        if not args.follow:
            return 0
        return await _follow(client, args, agency, answer.run_id, from_seq=paused_at + 1)

    return await _run(args, body)


async def threads_cancel(args: argparse.Namespace) -> int:
    async def body(client: AsyncAgencyClient) -> int:
        agency = await _thread_agency(client, args.thread)
        answer = await client.cancel(agency, args.thread, args.reason)
        _print(args, answer, "cancel requested")
        return 0

    return await _run(args, body)


async def threads_terminate(args: argparse.Namespace) -> int:
    async def body(client: AsyncAgencyClient) -> int:
        agency = await _thread_agency(client, args.thread)
        answer = await client.terminate(agency, args.thread, args.reason)
        _print(args, answer, "terminated already" if answer.status == "terminated" else
               "terminate requested")  # fmt: skip
        return 0

    return await _run(args, body)


async def threads_delete(args: argparse.Namespace) -> int:
    return await _erase(args, lambda client: client.delete_thread(args.thread), _thread_deleted)


async def agencies_delete(args: argparse.Namespace) -> int:
    return await _erase(args, lambda client: client.delete_agency(args.id), _agency_deleted)


async def users_forget(args: argparse.Namespace) -> int:
    return await _erase(args, lambda client: client.forget_end_user(args.id), _user_forgotten)


def _thread_deleted(answer: ThreadDeletion) -> str:
    return (
        f"deleted {len(answer.threads)} thread(s) at "
        f"{answer.deleted_at.isoformat()} (requested by {answer.requested_by})"
    )


def _agency_deleted(answer: AgencyDeletion) -> str:
    return (
        f"deleted agency {answer.agency_id} and {len(answer.threads)} thread(s) "
        f"(request {answer.request_id} by {answer.requested_by})"
    )


def _user_forgotten(answer: EndUserForgetting) -> str:
    return (
        f"deleted {len(answer.threads)} thread(s) of end user {answer.end_user_id} "
        f"(request {answer.request_id} by {answer.requested_by})"
    )


async def _erase(
    args: argparse.Namespace,
    erase: Callable[[AsyncAgencyClient], Awaitable[Erased]],
    said: Callable[[Erased], str],
) -> int:
    """One erasure asked of the API; its answer printed (as JSON with --json)."""

    async def body(client: AsyncAgencyClient) -> int:
        answer = await erase(client)
        _print(args, answer, said(answer))
        return 0

    return await _run(args, body)


class EventPrinter:
    """A run's events as lines; model text streams in place."""

    def __init__(self, *, as_json: bool = False) -> None:
        self._json = as_json
        self._streaming = False

    def __call__(self, event: EventView) -> None:
        if self._json:
            print(json.dumps(_builtins(event)), flush=True)
            return
        data = event.data
        if event.type == "model.delta":
            if not self._streaming:
                print("  🤖 ", end="", flush=True)
                self._streaming = True
            print(data.get("delta", ""), end="", flush=True)
            return
        if self._streaming and event.type == "model.completed":
            self._streaming = False
            print(flush=True)
            data = {**data, "message": {**data.get("message", {}), "content": ""}}
        line = describe(event.type, data, event.thread_id or "THREAD")
        if line:
            print(line, flush=True)


def describe(kind: str, data: dict[str, Any], thread: str = "THREAD") -> str | None:
    match kind:
        case "run.started":
            return f"▶ run {data.get('runId')} started ({data.get('agentType')})"
        case "model.completed":
            message = data.get("message", {})
            return model_answer(message.get("content", ""), message.get("toolCalls", []))
        case "tool.output":
            return f"  ✓ {data.get('toolName')}: {' '.join(str(data.get('output')).split())[:100]}"
        case "tool.error":
            return f"  ✗ {data.get('toolName')}: {data.get('error')}"
        case "hitl.interrupt":
            calls = ", ".join(
                f"{c.get('name')}({c.get('arguments')})" for c in data.get("proposedToolCalls", [])
            )
            return f"  ✋ awaiting approval: {calls}"
        case "run.paused":
            reason = str(data.get("reason"))
            return f"⏸ paused ({reason}); {pause_hint(reason, thread)}"
        case "run.completed":
            return f"■ completed: {data.get('result', '')}"
        case "run.error":
            return f"■ error: {data.get('error')}"
        case "run.canceled":
            return f"■ canceled: {data.get('reason', '')}"
        case "request.rejected":
            return f"■ rejected: {data.get('reason')}"
    return None


def model_answer(text: str, tool_calls: list[dict[str, Any]]) -> str | None:
    """A model's answer as lines: its text, then the tools it calls (arguments cut short)."""
    calls = ", ".join(f"{c.get('name')}({str(c.get('arguments', ''))[:60]})" for c in tool_calls)
    lines = [f"  🤖 {text}"] if text else []
    if calls:
        lines.append(f"  🔧 calls {calls}")
    return "\n".join(lines) or None


def pause_hint(reason: str, thread: str) -> str:
    """What goes on from a pause for `reason` (`contracts/events/run.py`, `PauseReason`)."""
    match reason:
        case "hitl":
            return f"`agency threads approve {thread}` (or `--reject`) resumes it"
        case "subagent":
            return "it waits for its subagents and resumes by itself when they report"
        case "exhausted":
            return f"`agency threads invoke {thread} MESSAGE` continues it with more steps"
        case "breakpoint":
            return f"before its model call; `agency threads approve {thread}` goes on"
    return f"nothing resumes it; `agency threads cancel {thread}` ends it"
