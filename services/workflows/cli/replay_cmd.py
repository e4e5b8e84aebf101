"""`agency workflow replay`: a workflow's whole history from the log, or re-executed.

The history is the workflow's own events (channel, invocations, answers, documents,
proposals) and every member thread's, interleaved in log order. It reads JetStream only
(like `agency replay`), so it works with the read models down; `@name:tag` without
`--agency` asks the API for the agency named `default`. Its arguments are registered by
`commands.py`, which imports this module when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

import httpx
import msgspec

from agency.contracts.codec import encode
from agency.contracts.events import WorkflowCreated
from agency.contracts.ids import validate_token
from agency.domain.comparison import format_comparison
from agency.domain.event_text import summarize
from agency.domain.workflow_members import parse_target, workflow_id
from agency.infra.endpoints import Endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.system import SystemLoadError
from agency.services.cli.arguments import agent_system, running_endpoints
from agency.services.cli.replay_cmd import report_json
from agency.services.workflows.cli.replay import (
    WorkflowRecord,
    WorkflowReplay,
    load_workflow,
    replay_workflow,
)

DEFAULT_AGENCY = "default"
DELTA = "model.delta"


class _Refused(Exception):
    """A request this command cannot carry out; reported in one line, exit status 2."""


async def workflow_replay(args: argparse.Namespace) -> int:
    try:
        endpoints = running_endpoints(args)
        tenant = args.tenant or endpoints.tenant_id
        if not tenant:
            raise _Refused("no tenant: pass --tenant (endpoints.json names none)")
        tenant = validate_token("tenant id", tenant)
        system = agent_system(args) if args.re_execute else None
        wf = await _workflow_id(args, endpoints, tenant)
        async with Bus(endpoints.nats_url, name="agency-workflow-replay") as bus:
            record = await load_workflow(bus.store, tenant, wf)
            if not record.events:
                raise _Refused(f"no workflow {args.target} in the log of tenant {tenant}")
            agency = _agency_of(record)
            agency_events = await bus.store.read(tenant, "agency", agency) if agency else []
        if system is None:
            _write(_json_rows(record, args.deltas) if args.json else _timeline(record, args))
            return 0
        replay = await replay_workflow(record, system, agency_events=agency_events)
    except (_Refused, SystemLoadError) as e:
        print(f"agency: {e}", file=sys.stderr)
        return 2
    _write([json.dumps(_report(replay))] if args.json else _report_lines(replay))
    return 0 if replay.same else 1


async def _workflow_id(args: argparse.Namespace, endpoints: Endpoints, tenant: str) -> str:
    if not args.target.startswith("@"):
        return validate_token("workflow id", args.target)
    name, tag = parse_target(args.target)
    agency = args.agency or await _default_agency(endpoints)
    return workflow_id(tenant, validate_token("agency id", agency), name, tag)


async def _default_agency(endpoints: Endpoints) -> str:
    if not endpoints.api_url or not endpoints.api_key:
        raise _Refused("no API to find the default agency: pass --agency")
    headers = {"Authorization": f"Bearer {endpoints.api_key}"}
    async with httpx.AsyncClient(base_url=endpoints.api_url, headers=headers, timeout=30) as c:
        try:
            response = await c.get("/agencies")
        except httpx.HTTPError as e:
            raise _Refused(f"the API at {endpoints.api_url} did not answer: {e}") from e
    if response.status_code != 200:
        raise _Refused(f"the API refused GET /agencies ({response.status_code}): {response.text}")
    named = [a["id"] for a in response.json() if a.get("name") == DEFAULT_AGENCY]
    if not named:
        raise _Refused(f"no agency named {DEFAULT_AGENCY!r}: pass --agency")
    return str(named[0])


def _agency_of(record: WorkflowRecord) -> str:
    for event in record.events:
        if isinstance(event.payload, WorkflowCreated):
            return event.payload.agency_id
    return record.events[0].envelope.agency_id or ""


def _write(lines: Iterable[str]) -> None:
    for line in lines:
        sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _shown(record: WorkflowRecord, deltas: bool) -> list[tuple[str, RecordedEvent]]:
    return [(who, e) for who, e in record.timeline() if deltas or e.type != DELTA]


def _timeline(record: WorkflowRecord, args: argparse.Namespace) -> list[str]:
    first = record.events[0].payload
    title = args.target
    if isinstance(first, WorkflowCreated):
        title = f"@{first.name}" + (f":{first.tag}" if first.tag else "")
    members = ", ".join(
        f"@{name} (thread {events[0].envelope.aggregate_id}, {len(events)} events)"
        for name, events in record.members.items()
        if events
    )
    lines = [
        f"# workflow {title} {record.workflow_id}, {len(record.events)} events",
        f"# members: {members or 'none'}",
    ]
    width = max([len("@workflow"), *(len(name) for name in record.members)])
    for who, event in _shown(record, args.deltas):
        env = event.envelope
        ts = env.ts.strftime("%H:%M:%S.%f")[:-3]
        text = f"{ts} {who:<{width}} #{env.seq:<5} {env.type:<24} {summarize(env.payload)}"
        lines.append(text.rstrip())
    return lines


class _JsonRow(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    who: str
    aggregate_id: str
    seq: int
    stream_seq: int
    ts: str
    type: str
    run_id: str | None
    summary: str
    event: msgspec.Raw


_encoder = msgspec.json.Encoder()


def _json_rows(record: WorkflowRecord, deltas: bool) -> Iterable[str]:
    for who, event in _shown(record, deltas):
        env = event.envelope
        row = _JsonRow(
            who=who, aggregate_id=env.aggregate_id, seq=env.seq, stream_seq=event.stream_seq,
            ts=env.ts.isoformat(), type=env.type, run_id=env.run_id,
            summary=summarize(env.payload), event=msgspec.Raw(encode(env)),
        )  # fmt: skip
        yield _encoder.encode(row).decode()


def _report_lines(replay: WorkflowReplay) -> list[str]:
    d = replay.divergence
    if d is None:
        lines = [f"controller: same: {replay.decisions_checked} decisions decided again"]
    else:
        lines = [
            f"controller: diverged at workflow event #{d.seq} "
            f"(decision {replay.decisions_checked})",
            f"  recorded: {json.dumps(d.recorded, ensure_ascii=False)[:400]}",
            f"  decided:  {json.dumps(d.decided, ensure_ascii=False)[:400]}",
        ]
    lines += [line for c in replay.members.comparisons for line in format_comparison(c)]
    if replay.same:
        threads = len(replay.members.comparisons)
        lines.append(
            f"same: {replay.decisions_checked} decisions and {replay.members.compared} "
            f"events of {threads} member threads"
        )
    else:
        lines.append("diverged")
    return lines


def _report(replay: WorkflowReplay) -> dict[str, Any]:
    d = replay.divergence
    controller: dict[str, Any] = {"decisions": replay.decisions_checked, "same": d is None}
    if d is not None:
        controller["divergence"] = {"seq": d.seq, "recorded": d.recorded, "decided": d.decided}
    return {
        "same": replay.same,
        "controller": controller,
        "members": report_json(replay.members.comparisons),
    }
