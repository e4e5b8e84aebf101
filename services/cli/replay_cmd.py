"""`agency replay` and `agency fork`: a thread's history from the log, re-executed or forked.

`replay` reads JetStream only (never PostgreSQL), so it works with the read models down.
`fork` goes through the HTTP API when `api_url` is in endpoints.json, else straight to NATS.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from agency.services.cli.arguments import (
    add_app,
    add_data_dir,
    add_replay_options,
    running_endpoints,
)

if TYPE_CHECKING:
    import httpx

    from agency.infra.endpoints import Endpoints
    from agency.infra.jetstream.connection import Bus
    from agency.infra.jetstream.records import RecordedEvent
    from agency.services.threads.fork import ForkResult
    from agency.services.threads.tree import ThreadTree

HTTP_TIMEOUT = 30.0


class _Refused(Exception):
    """A request this command cannot carry out; reported in one line, exit status 2."""


def register(groups: Any) -> None:
    replay = groups.add_parser(
        "replay", help="print a thread's history from the log, or re-execute it"
    )
    replay.add_argument("thread", help="thread id")
    _add_tenant(replay)
    replay.add_argument(
        "--tree", action="store_true", help="include every subagent thread below it, interleaved"
    )
    replay.add_argument(
        "--from-seq", type=int, default=None, help="start at this sequence of the thread"
    )
    replay.add_argument(
        "--until-seq", type=int, default=None, help="stop after this sequence of the thread"
    )
    replay.add_argument(
        "--type",
        action="append",
        default=[],
        metavar="TYPE",
        help="only these event types (repeatable, comma-separated, patterns like 'tool.*')",
    )
    add_replay_options(
        replay,
        deltas="also show streamed model.delta events",
        re_execute="run the current runtime code over the recorded history (no model, tool "
        "or person is called, nothing is written) and compare; exit status 1 if it diverges",
    )
    add_app(replay)
    add_data_dir(replay)
    replay.set_defaults(handler=replay_thread)

    fork = groups.add_parser("fork", help="start a new thread from a thread's history")
    fork.add_argument("thread", help="thread id")
    fork.add_argument("--at-seq", type=int, required=True, help="copy the history up to this event")
    fork.add_argument("--agent-type", default=None, help="switch the fork to this blueprint")
    fork.add_argument(
        "--agency", default=None, help="the thread's agency (default: read from the log)"
    )
    fork.add_argument("--json", action="store_true", help="print the result as JSON")
    _add_tenant(fork)
    add_app(fork)
    add_data_dir(fork)
    fork.set_defaults(handler=fork_command)


def _add_tenant(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tenant", default=None, help="tenant id (default: tenant_id in endpoints.json)"
    )


def _tenant(args: argparse.Namespace, endpoints: Endpoints) -> str:
    from agency.contracts.ids import validate_token

    tenant = args.tenant or endpoints.tenant_id
    if not tenant:
        raise _Refused("no tenant: pass --tenant (endpoints.json names none)")
    return validate_token("tenant id", tenant)


def _fail(problem: object) -> int:
    print(f"agency: {problem}", file=sys.stderr)
    return 2


def _write(lines: Iterable[str]) -> None:
    out = sys.stdout
    for line in lines:
        out.write(line)
        out.write("\n")
    out.flush()


# --- replay --------------------------------------------------------------------------


async def replay_thread(args: argparse.Namespace) -> int:
    from agency.contracts.ids import validate_token
    from agency.domain.comparison import format_comparison
    from agency.infra.jetstream.connection import Bus
    from agency.services.agents.system import SystemLoadError, load_system
    from agency.services.runtime.replay.reexecute import reexecute
    from agency.services.threads.reads import ThreadNotFound, read_thread
    from agency.services.threads.tree import ThreadTree, TreeNode, load_tree

    try:
        endpoints = running_endpoints(args)
        tenant = _tenant(args, endpoints)
        thread = validate_token("thread id", args.thread)
        if args.re_execute and (args.from_seq or args.until_seq or args.type):
            raise _Refused(
                "--re-execute replays the whole history; --from-seq, --until-seq and --type "
                "apply to the timeline only"
            )
        system = load_system(args.app) if args.re_execute else None
        async with Bus(endpoints.nats_url, name="agency-replay") as bus:
            if args.tree:
                tree = await load_tree(bus.store, bus.nc, tenant, thread)
            else:
                events = await read_thread(bus.store, tenant, thread)
                tree = ThreadTree(thread, (TreeNode(thread, None, 0, tuple(events)),))
            if system is None:
                _timeline(args, tree)
                return 0
            agencies = {n.events[0].envelope.agency_id for n in tree.nodes if n.events}
            agency_events: list[RecordedEvent] = []
            for agency in sorted(a for a in agencies if a):
                agency_events.extend(await bus.store.read(tenant, "agency", agency))
        report = await reexecute(
            [node.events for node in tree.nodes], system, agency_events=agency_events
        )
    except (_Refused, ThreadNotFound, SystemLoadError) as e:
        return _fail(e)
    if args.json:
        _write([json.dumps(report_json(report.comparisons))])
    else:
        lines = [line for c in report.comparisons for line in format_comparison(c)]
        if report.same:
            threads = len(report.comparisons)
            across = f" across {threads} threads" if threads > 1 else ""
            lines.append(f"same: {report.compared} events compared{across}")
        else:
            lines.append("diverged")
        _write(lines)
    return 0 if report.same else 1


def _timeline(args: argparse.Namespace, tree: ThreadTree) -> None:
    from agency.domain.timeline import format_row, json_row, rows, window_for
    from agency.services.runtime.checkpoint import verify

    root = tree.nodes[0]
    window = window_for(
        root.events,
        from_seq=args.from_seq,
        until_seq=args.until_seq,
        types=args.type,
        deltas=args.deltas,
    )
    shown = rows(((node.depth, event) for node, event in tree.interleaved()), window)
    if args.json:
        _write(json_row(row) for row in shown)
        return
    checks = {
        (node.thread_id, seq): ok for node in tree.nodes for seq, ok in verify(node.events).items()
    }
    _write(_header(tree, args.tree))
    _write(format_row(row, tree=args.tree, checks=checks) for row in shown)


def _header(tree: ThreadTree, as_tree: bool) -> list[str]:
    from agency.domain.timeline import label

    lines = []
    for node in tree.nodes:
        first = node.events[0].payload if node.events else None
        agent = getattr(first, "agent_type", "?")
        indent = "  " * node.depth
        name = f"{label(node.thread_id)} " if as_tree else ""
        lines.append(
            f"# {indent}{name}thread {node.thread_id} agent {agent}, {len(node.events)} events"
        )
    return lines


def report_json(comparisons: Sequence[Any]) -> dict[str, Any]:
    threads = []
    for c in comparisons:
        entry: dict[str, Any] = {"threadId": c.thread_id, "compared": c.compared, "same": c.same}
        if c.divergence is not None:
            d = c.divergence
            entry["divergence"] = {
                "index": d.index,
                "recorded": _brief(d.recorded),
                "reexecuted": _brief(d.reexecuted),
                "differences": list(d.differences),
            }
        if c.stopped:
            entry["note"] = c.stopped
        if c.failed:
            entry["error"] = c.failed
        threads.append(entry)
    return {"same": all(c.same for c in comparisons), "threads": threads}


def _brief(event: RecordedEvent | None) -> dict[str, Any] | None:
    if event is None:
        return None
    return {"seq": event.seq, "type": event.type}


# --- fork ----------------------------------------------------------------------------


async def fork_command(args: argparse.Namespace) -> int:
    from agency.contracts.ids import validate_token
    from agency.infra.jetstream.connection import Bus
    from agency.services.agents.system import SystemLoadError
    from agency.services.threads.fork import ForkError
    from agency.services.threads.reads import ThreadNotFound

    try:
        endpoints = running_endpoints(args)
        tenant = _tenant(args, endpoints)
        thread = validate_token("thread id", args.thread)
        if endpoints.api_url:
            agency = args.agency or await _agency_of(endpoints, tenant, thread)
            result = await fork_over_http(
                endpoints.api_url,
                endpoints.api_key,
                agency,
                thread,
                args.at_seq,
                agent_type=args.agent_type,
            )
        else:
            async with Bus(endpoints.nats_url, name="agency-fork") as bus:
                result = await fork_over_nats(
                    bus, tenant, thread, args.at_seq, agent_type=args.agent_type, app=args.app
                )
    except (_Refused, ThreadNotFound, ForkError, SystemLoadError) as e:
        return _fail(e)
    if args.json:
        import msgspec

        _write([json.dumps(msgspec.to_builtins(result.answer()))])
    else:
        lines = [f"forked {thread} at seq {result.at_seq}: new thread {result.thread_id}"]
        lines.extend(f"  child {old} → {new}" for old, new in result.children.items())
        for forked, runs in result.canceled_runs.items():
            lines.extend(f"  run {run} of {forked} canceled (forked mid-run)" for run in runs)
        _write(lines)
    return 0


async def fork_over_nats(
    bus: Bus,
    tenant: str,
    thread: str,
    at_seq: int,
    *,
    agent_type: str | None = None,
    app: str | None = None,
) -> ForkResult:
    from agency.contracts.events import BlueprintDeleted, BlueprintSaved
    from agency.services.agents.system import load_system
    from agency.services.threads.fork import fork_thread
    from agency.services.threads.reads import read_thread

    known = None
    if agent_type is not None:
        events = await read_thread(bus.store, tenant, thread)
        agency = events[0].envelope.agency_id or ""
        known = set(load_system(app).blueprints)
        for event in await bus.store.read(tenant, "agency", agency) if agency else []:
            match event.payload:
                case BlueprintSaved(blueprint=spec):
                    known.add(spec.name)
                case BlueprintDeleted(name=name):
                    known.discard(name)
    return await fork_thread(
        bus, tenant, thread, at_seq, agent_type=agent_type, known_agent_types=known
    )


async def _agency_of(endpoints: Endpoints, tenant: str, thread: str) -> str:
    from agency.infra.jetstream.connection import Bus
    from agency.services.threads.reads import read_thread

    async with Bus(endpoints.nats_url, name="agency-fork") as bus:
        events = await read_thread(bus.store, tenant, thread)
    agency = events[0].envelope.agency_id
    if not agency:
        raise _Refused(f"thread {thread} names no agency; pass --agency")
    return agency


async def fork_over_http(
    api_url: str,
    api_key: str | None,
    agency: str,
    thread: str,
    at_seq: int,
    *,
    agent_type: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    headers: dict[str, str] | None = None,
) -> ForkResult:
    import httpx

    from agency.contracts.ids import validate_token
    from agency.services.threads.fork import ForkResult

    body: dict[str, Any] = {"atSeq": at_seq}
    if agent_type is not None:
        body["agentType"] = agent_type
    sent = dict(headers or {})
    if api_key:
        sent["Authorization"] = f"Bearer {api_key}"
    path = f"/agency/{validate_token('agency id', agency)}/agent/{thread}/fork"
    async with httpx.AsyncClient(
        base_url=api_url, timeout=HTTP_TIMEOUT, transport=transport
    ) as client:
        try:
            response = await client.post(path, json=body, headers=sent)
        except httpx.HTTPError as e:
            raise _Refused(f"the API at {api_url} did not answer: {e}") from e
    if response.status_code not in (201, 202):  # 202: the registry is still writing it
        try:
            payload = response.json()
            problem = payload.get("error") or payload.get("detail") or response.text
        except ValueError:
            problem = response.text
        raise _Refused(f"the API refused the fork ({response.status_code}): {problem}")
    data = response.json()
    runs = tuple(data.get("canceledRuns", []))
    return ForkResult(
        thread_id=data["threadId"],
        source_thread_id=thread,
        at_seq=int(data.get("atSeq", at_seq)),
        children=dict(data.get("children", {})),
        canceled_runs={data["threadId"]: runs} if runs else {},
    )
