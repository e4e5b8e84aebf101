"""One tenant cannot grow a subagent tree without bound: a blueprint that lists itself as a
subagent, with a model that always delegates, stops at the tree's limits and reads why in
its tool results; terminate and cancel of the root stop the whole tree in one call.

Two runtime and two subagents workers spawn concurrently (tests/fairness/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from agency.contracts.commands import TerminateThread
from agency.contracts.events import TreeStopped, TreeThreadAdmitted
from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.e2e.conftest import Client
from tests.helpers import assert_eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ACTIVE = {"running", "paused"}


def recursive(name: str, limits: dict[str, int], *, blocking: bool = True) -> dict[str, Any]:
    """A blueprint whose only subagent is itself."""
    entry: str | dict[str, Any] = name if blocking else {"name": name, "blocking": False}
    return {
        "name": name,
        "prompt": "You split every task in parts and delegate each part.",
        "tags": ["default"],
        "config": {"subagents": {"subagents": [entry]}},
        "limits": limits,
    }


def always_delegates(client: Client, key: str, name: str, parts: int) -> None:
    """Each thread's first answer delegates `parts` parts (mentioning `key`, so each child
    follows the same script); its next one ends its run."""
    calls = tuple(
        ScriptToolCall(
            name="task", arguments={"description": f"part {i} of {key}", "subagentType": name}
        )
        for i in range(parts)
    )
    client.llm.script(key, [ScriptStep(tool_calls=calls), ScriptStep(content="done")])


async def start(client: Client, blueprint: dict[str, Any], parts: int) -> str:
    r = await client.http.post(f"/agency/{client.agency}/blueprints", json=blueprint)
    assert r.status_code == 201, r.text
    assert r.json()["limits"] == blueprint["limits"]
    key = f"{blueprint['name']}-{client.agency}"
    always_delegates(client, key, blueprint["name"], parts)
    root = await client.thread(blueprint["name"])
    await client.invoke(root, f"Do {key}")
    return root


async def threads(client: Client) -> list[dict[str, Any]]:
    r = await client.http.get(f"/agency/{client.agency}/agents")
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()
    return found


async def tree_log(bus: Bus, tenant: str, root: str) -> list[Any]:
    return [e.payload for e in await bus.store.read(tenant, "tree", root)]


def tool_results(client: Client, key: str) -> list[str]:
    """What the model read as tool results in the conversations of this tree."""
    seen: list[str] = []
    for body in client.llm.requests:
        messages = body.get("messages", []) if isinstance(body, dict) else []
        if not any(key in str(m.get("content", "")) for m in messages):
            continue
        seen += [str(m.get("content", "")) for m in messages if m.get("role") == "tool"]
    return seen


def depths(listed: list[dict[str, Any]], root: str) -> dict[str, int]:
    parent = {t["id"]: (t["parent"] or {}).get("threadId") for t in listed}
    found: dict[str, int] = {}
    for thread in parent:
        depth, current = 0, thread
        while current != root:
            current, depth = parent[current], depth + 1
        found[thread] = depth
    return found


async def test_the_tree_stops_at_depth_fan_out_and_size_and_the_model_reads_why(
    client: Client, bus: Bus
) -> None:
    blueprint = recursive("recurse", {"maxDepth": 2, "maxChildren": 2, "maxThreads": 6})
    root = await start(client, blueprint, parts=3)
    await client.until(root, lambda s: s["run"]["status"] == "completed", timeout=120)

    listed = await threads(client)
    assert len(listed) == 6  # maxThreads, the root counted
    assert max(depths(listed, root).values()) == 2
    parents = [(t["parent"] or {}).get("threadId") for t in listed]
    assert max(parents.count(t["id"]) for t in listed) == 2
    assert all(t["status"] == "completed" for t in listed), [t["status"] for t in listed]
    # Each refusal was the spawn call's tool error, naming its limit and value.
    results = tool_results(client, f"recurse-{client.agency}")
    for limit in (
        "the depth limit (maxDepth) is 2",
        "the fan-out limit (maxChildren) is 2",
        "the tree limit (maxThreads) is 6 threads",
    ):
        assert any(limit in r for r in results), limit
    admitted = await tree_log(bus, client.tenant, root)
    assert len(admitted) == 5 and all(isinstance(e, TreeThreadAdmitted) for e in admitted)
    r = await client.http.get(f"/agency/{client.agency}/blueprints/recurse")
    assert r.status_code == 200 and r.json()["limits"] == blueprint["limits"], r.text


async def every_started_run_ended_canceled(client: Client, thread: str) -> None:
    """Each run the thread started ended `run.canceled`; a run asked for after the thread
    was terminated never started (`request.rejected`)."""
    r = await client.http.get(f"{client.path(thread)}/events", params={"limit": 1000})
    assert r.status_code == 200, r.text
    events = r.json()["events"]
    started = {e["runId"] for e in events if e["type"] == "run.started"}
    ends = {e["runId"]: e["type"] for e in events if e["type"].startswith("run.") and e["runId"]}
    ended = {run: ends.get(run) for run in started}
    assert all(kind == "run.canceled" for kind in ended.values()), (thread, ended)


async def test_a_non_blocking_spawn_beyond_the_limit_is_a_tool_error_not_a_started_answer(
    client: Client, bus: Bus
) -> None:
    blueprint = recursive("scatter", {"maxThreads": 3}, blocking=False)
    root = await start(client, blueprint, parts=3)

    async def settled() -> list[dict[str, Any]]:
        listed = await threads(client)
        assert len(listed) == 3 and all(t["status"] == "completed" for t in listed), listed
        return listed

    await assert_eventually(settled, timeout=60, interval=0.2)
    results = tool_results(client, f"scatter-{client.agency}")
    assert any("the tree limit (maxThreads) is 3 threads" in r for r in results), results
    # Only the two children admitted were answered "started" (each names its child).
    started = {r for r in results if r.startswith("Subagent started")}
    assert len(started) == 2, started
    assert len(await tree_log(bus, client.tenant, root)) == 2


async def growing(client: Client, root: str, at_least: int) -> None:
    async def grown() -> None:
        assert len(await threads(client)) >= at_least

    await assert_eventually(grown, timeout=60, interval=0.1)


def nothing_admitted_after_the_stop(log: list[Any]) -> TreeStopped:
    """The tree's log holds one stop, and no thread was admitted after it."""
    stops = [i for i, e in enumerate(log) if isinstance(e, TreeStopped)]
    assert len(stops) == 1, log
    assert not any(isinstance(e, TreeThreadAdmitted) for e in log[stops[0] :]), log
    stop = log[stops[0]]
    assert isinstance(stop, TreeStopped)
    return stop


@pytest.mark.parametrize("via", ["http", "nats"])
async def test_terminate_of_the_root_mid_growth_stops_the_whole_tree_in_one_call(
    client: Client, bus: Bus, via: str
) -> None:
    blueprint = recursive(f"sprawl-{via}", {"maxChildren": 2})
    root = await start(client, blueprint, parts=2)
    await growing(client, root, at_least=5)

    if via == "http":
        r = await client.http.post(f"{client.path(root)}/terminate", json={"reason": "enough"})
        assert r.status_code == 202 and r.json()["status"] == "terminating", r.text
    else:  # the runtime.terminate command, as a service or the gateway sends it
        command = TerminateThread(agency_id=client.agency, thread_id=root, reason="enough")
        await bus.commands.send(client.tenant, command)

    async def all_terminated() -> list[dict[str, Any]]:
        listed = await threads(client)
        assert all(t["status"] == "terminated" for t in listed), [t["status"] for t in listed]
        return listed

    listed = await assert_eventually(all_terminated, timeout=60, interval=0.2)
    log = await tree_log(bus, client.tenant, root)
    stop = nothing_admitted_after_the_stop(log)
    assert (stop.thread_id, stop.mode) == (root, "terminate")
    admitted = {e.thread_id for e in log if isinstance(e, TreeThreadAdmitted)}
    assert {t["id"] for t in listed} - {root} <= admitted
    for thread in listed:
        await every_started_run_ended_canceled(client, thread["id"])


async def test_cancel_of_an_idle_root_cancels_its_growing_tree_in_one_call(
    client: Client, bus: Bus
) -> None:
    # Non-blocking children: the root's own run ends at once while its tree grows.
    blueprint = recursive("spread", {"maxChildren": 2}, blocking=False)
    root = await start(client, blueprint, parts=2)
    await client.until(root, lambda s: s["run"]["status"] == "completed", timeout=60)
    await growing(client, root, at_least=5)

    r = await client.http.post(f"{client.path(root)}/cancel", json={"reason": "enough"})
    assert r.status_code == 202, r.text
    assert r.json()["runId"] is None

    async def nothing_runs() -> list[dict[str, Any]]:
        listed = await threads(client)
        assert not [t for t in listed if t["status"] in ACTIVE], [t["status"] for t in listed]
        return listed

    listed = await assert_eventually(nothing_runs, timeout=60, interval=0.2)
    log = await tree_log(bus, client.tenant, root)
    stop = nothing_admitted_after_the_stop(log)
    assert (stop.thread_id, stop.mode) == (root, "cancel")
    statuses = {t["status"] for t in listed}
    assert "canceled" in statuses or "terminated" in statuses, statuses
    assert len(await threads(client)) == len(listed)


async def test_cancel_of_a_waiting_root_mid_growth_cancels_every_run_of_its_tree(
    client: Client, bus: Bus
) -> None:
    # Blocking children: the root's run waits for them, so the cancel is bound to it.
    blueprint = recursive("nest", {"maxChildren": 2})
    root = await start(client, blueprint, parts=2)
    await growing(client, root, at_least=5)

    r = await client.http.post(f"{client.path(root)}/cancel", json={"reason": "enough"})
    assert r.status_code == 202 and r.json()["runId"] is not None, r.text

    async def nothing_runs() -> list[dict[str, Any]]:
        listed = await threads(client)
        assert not [t for t in listed if t["status"] in ACTIVE], [t["status"] for t in listed]
        return listed

    listed = await assert_eventually(nothing_runs, timeout=60, interval=0.2)
    stop = nothing_admitted_after_the_stop(await tree_log(bus, client.tenant, root))
    assert (stop.thread_id, stop.mode) == (root, "cancel")
    assert (await client.state(root))["run"]["status"] == "canceled"
    for thread in listed:
        await every_started_run_ended_canceled(client, thread["id"])
