"""Ids an archive's events must change to live in another tenant.

Ids are kept: a thread, agency, run or call is the same id in the target. The exceptions
are the ids the services derive from the tenant: a subagent's thread id and token (from
the tenant, its parent and the call), and the run ids derived from those threads (a
child's first run, a message's run, a report's run). The services recompute them when they
react to the imported events, so each is replaced by what the target tenant derives; every
mention of one (a payload, a text the model saw, an idempotency key) changes with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from agency.contracts.envelope import Envelope
from agency.contracts.events import RunStarted, SubagentMessaged, ThreadCreated
from agency.contracts.ids import derived_id
from agency.domain.child_naming import (
    child_run_id,
    child_thread_id,
    child_token,
    message_run_id,
)


def tenant_remap(source: str, target: str, events: Sequence[Envelope]) -> dict[str, str]:
    """Old id → new id for every derived id of `events` (in log order) that changes when
    they move from tenant `source` to `target`; empty when the tenant stays."""
    if source == target:
        return {}
    ids: dict[str, str] = {}
    for e in events:
        created = e.payload
        if e.aggregate != "thread" or not isinstance(created, ThreadCreated):
            continue
        ref = created.parent
        if ref is None or ref.tool_call_id is None:
            continue
        parent, call = ref.thread_id, ref.tool_call_id
        new_parent = ids.get(parent, parent)
        if e.aggregate_id == child_thread_id(source, parent, call):
            ids[e.aggregate_id] = child_thread_id(target, new_parent, call)
        if ref.token == child_token(source, parent, call):
            ids[ref.token] = child_token(target, new_parent, call)
    threads = {old: new for old, new in ids.items() if old.startswith("th")}
    for old, new in threads.items():
        ids[child_run_id(old)] = child_run_id(new)
    for e in events:
        match e.payload:
            case SubagentMessaged(child_thread_id=child, tool_call_id=call) if child in threads:
                ids[message_run_id(child, call)] = message_run_id(threads[child], call)
            case _:
                pass
    for e in events:
        if isinstance(e.payload, RunStarted) and e.aggregate_id in threads:
            run = e.payload.run_id
            ids[derived_id("run_", "report", e.aggregate_id, run)] = derived_id(
                "run_", "report", threads[e.aggregate_id], ids.get(run, run)
            )
    return ids


def relink(data: bytes, ids: dict[str, str]) -> bytes:
    """`data` with every id of `ids` replaced (ids are unique tokens: nothing else changes)."""
    for old, new in ids.items():
        data = data.replace(old.encode(), new.encode())
    return data
