"""Assistants and threads through the official LangGraph SDK client."""

from __future__ import annotations

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import (
    AuthenticationError,
    BadRequestError,
    NotFoundError,
)

from agency.contracts.events import BlueprintDeleted
from agency.infra.jetstream.connection import Bus
from agency.services.api import known
from agency.services.llm.fake_scripts import ScriptStep
from tests.helpers import assert_eventually
from tests.langgraph.conftest import LangGraph, new_tenant
from tests.langgraph.helpers import ask


async def test_assistants_are_the_agencys_blueprints(lg: LangGraph) -> None:
    found = await lg.client.assistants.search(limit=100)
    names = {a["assistant_id"] for a in found}
    assert {"worker", "approver", "manager"} <= names
    (worker,) = await lg.client.assistants.search(graph_id="worker")
    assert worker["graph_id"] == "worker" and worker["metadata"]["agency_id"] == lg.agency
    got = await lg.client.assistants.get("approver")
    assert got["assistant_id"] == "approver" and got["version"] == 1
    with pytest.raises(NotFoundError, match="nosuch"):
        await lg.client.assistants.get("nosuch")


async def test_the_sdk_key_header_is_required(lg: LangGraph) -> None:
    async with get_client(url=f"{lg.url}/langgraph", api_key="ak_wrong_key") as bad:
        with pytest.raises(AuthenticationError, match="as 'x-api-key'"):
            await bad.assistants.search()


async def test_thread_create_get_search_state_and_history(lg: LangGraph) -> None:
    key = "lg-threads-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="hello back")])
    thread = await lg.client.threads.create(graph_id="worker", metadata={"user": "ann"})
    thread_id = thread["thread_id"]
    assert thread["status"] == "idle" and thread["metadata"]["user"] == "ann"
    assert thread["metadata"]["graph_id"] == "worker"
    other = await lg.client.threads.create(graph_id="approver")

    result = await lg.client.runs.wait(
        thread_id, "worker", input={"messages": [{"role": "user", "content": key}]}
    )
    assert isinstance(result, dict)
    assert [m["type"] for m in result["messages"]] == ["human", "ai"]
    assert result["messages"][-1]["content"] == "hello back"

    got = await lg.client.threads.get(thread_id)
    assert got["status"] == "idle" and got["values"]["messages"][-1]["content"] == "hello back"

    mine = await lg.client.threads.search(metadata={"user": "ann"})
    assert [t["thread_id"] for t in mine] == [thread_id]
    both = {t["thread_id"] for t in await lg.client.threads.search(limit=10)}
    assert both == {thread_id, other["thread_id"]}
    approvers = await lg.client.threads.search(metadata={"graph_id": "approver"})
    assert [t["thread_id"] for t in approvers] == [other["thread_id"]]

    state = await lg.client.threads.get_state(thread_id)
    assert state["values"]["messages"][-1]["content"] == "hello back"
    assert state["next"] == [] and state["interrupts"] == []
    history = await lg.client.threads.get_history(thread_id, limit=5)
    assert history[0]["checkpoint"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    assert [len(h["values"]["messages"]) for h in history] == [2, 1]
    assert (
        history[0]["parent_checkpoint"]["checkpoint_id"]
        == (history[1]["checkpoint"]["checkpoint_id"])
    )
    earlier = await lg.client.threads.get_history(
        thread_id, before=history[0]["checkpoint"]["checkpoint_id"]
    )
    assert [len(h["values"]["messages"]) for h in earlier] == [1]
    past = await lg.client.threads.get_state(
        thread_id, checkpoint_id=history[1]["checkpoint"]["checkpoint_id"]
    )
    assert [m["type"] for m in past["values"]["messages"]] == ["human"]


async def test_a_conversation_reads_back_whole_after_every_turn(lg: LangGraph) -> None:
    """Each turn reads the thread on from where the last read of it ended: every answer,
    state and history agrees with a fold of the whole log, turn after turn, and what one
    request does to its view (a background run's placeholder) is not seen by the next."""
    key = "lg-turns-" + lg.agency
    thread_id = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    expected: list[str] = []
    for turn in range(1, 5):
        asked = key + "-" * turn  # the longest key mentioned wins: each turn its own answer
        lg.llm.script(asked, [ScriptStep(content=f"answer {turn}")] * 4)
        if turn == 3:
            background = await lg.client.runs.create(thread_id, "worker", input=ask(asked))
            result = await lg.client.runs.join(thread_id, background["run_id"])
        else:
            result = await lg.client.runs.wait(thread_id, "worker", input=ask(asked))
        expected += [asked, f"answer {turn}"]
        assert isinstance(result, dict)
        assert [m["content"] for m in result["messages"]] == expected
        state = await lg.client.threads.get_state(thread_id)
        assert [m["content"] for m in state["values"]["messages"]] == expected
        ids = [m["id"] for m in state["values"]["messages"]]
        assert len(set(ids)) == len(ids)
        # A checkpoint's state is folded from the log's start, up to that checkpoint.
        latest = state["checkpoint"]["checkpoint_id"]
        at_latest = await lg.client.threads.get_state(thread_id, checkpoint_id=latest)
        assert at_latest["values"] == state["values"]
        runs = await lg.client.runs.list(thread_id)
        assert len(runs) == turn and {r["status"] for r in runs} == {"success"}
    got = await lg.client.threads.get(thread_id)
    assert got["status"] == "idle" and got["values"] == state["values"]
    # A run joined after it ended answers the thread as it stood at its end.
    joined = await lg.client.runs.join(thread_id, background["run_id"])
    assert isinstance(joined, dict)
    assert [m["content"] for m in joined["messages"]] == expected[:6]


async def test_a_thread_created_without_assistant_is_bound_by_its_first_run(
    lg: LangGraph,
) -> None:
    """As UIs built on the SDK do: create a thread, then run an assistant on it."""
    key = "lg-unbound-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="bound now")])
    thread = await lg.client.threads.create()
    thread_id = thread["thread_id"]
    assert thread["status"] == "idle" and thread["values"]["messages"] == []
    assert (await lg.client.threads.get(thread_id))["thread_id"] == thread_id
    assert (await lg.client.threads.get_state(thread_id))["values"]["messages"] == []
    assert await lg.client.threads.get_history(thread_id) == []
    final = await lg.client.runs.wait(thread_id, "approver", input=ask(key))
    assert isinstance(final, dict) and final["messages"][-1]["content"] == "bound now"
    got = await lg.client.threads.get(thread_id)
    assert got["metadata"]["graph_id"] == "approver"


async def test_thread_errors_say_what_does_not_map(lg: LangGraph) -> None:
    with pytest.raises(BadRequestError, match="graph_id"):
        await lg.client.threads.create(metadata={"user": "bob"})
    with pytest.raises(BadRequestError, match="strings"):
        await lg.client.threads.create(graph_id="worker", metadata={"n": 1})
    with pytest.raises(NotFoundError):
        await lg.client.threads.get("01JD0000000000000000000000")
    with pytest.raises(NotFoundError, match="assistant 'ghost' not found"):
        await lg.client.threads.create(graph_id="ghost")


async def test_a_thread_of_the_agency_s_own_blueprint(lg: LangGraph) -> None:
    headers = {"Authorization": f"Bearer {lg.key}"}
    async with httpx.AsyncClient(base_url=lg.url, headers=headers, timeout=20) as http:
        r = await http.post(f"/agency/{lg.agency}/blueprints", json={"name": "own-helper"})
        assert r.status_code == 201, r.text
    thread = await lg.client.threads.create(graph_id="own-helper", metadata={"user": "ann"})
    assert thread["metadata"]["graph_id"] == "own-helper" and thread["status"] == "idle"
    assert thread["metadata"]["user"] == "ann"
    assert (await lg.client.threads.get(thread["thread_id"]))["metadata"] == thread["metadata"]


async def test_a_blueprint_deleted_from_the_log_makes_no_more_threads(
    lg: LangGraph, bus: Bus
) -> None:
    """A blueprint found by a create is not read again for a while; its deletion, appended
    to the agency's log by any service, is heard at once: the creates after it, LangGraph's
    and the native one, are refused."""
    headers = {"Authorization": f"Bearer {lg.key}"}
    async with httpx.AsyncClient(base_url=lg.url, headers=headers, timeout=20) as http:
        r = await http.post(f"/agency/{lg.agency}/blueprints", json={"name": "short-lived"})
        assert r.status_code == 201, r.text
        await lg.client.threads.create(graph_id="short-lived")
        r = await http.post(f"/agency/{lg.agency}/agents", json={"agentType": "short-lived"})
        assert r.status_code in (201, 202), r.text
        _, position = await bus.store.read_positioned(lg.tenant, "agency", lg.agency, after=None)
        await bus.store.append(
            lg.tenant, "agency", lg.agency, [BlueprintDeleted(name="short-lived")],
            expected=position,
        )  # fmt: skip

        async def refused() -> str:
            try:
                await lg.client.threads.create(graph_id="short-lived")
            except NotFoundError as e:
                return str(e)
            raise AssertionError("a thread of the deleted blueprint was created")

        # Well within the time a found blueprint is kept: heard, not expired.
        message = await assert_eventually(refused, timeout=known.BLUEPRINT_TTL / 3)
        assert "assistant 'short-lived' not found" in message
        r = await http.post(f"/agency/{lg.agency}/agents", json={"agentType": "short-lived"})
        assert r.status_code == 404 and "unknown agentType 'short-lived'" in r.text, r.text


async def test_the_agency_is_the_header_s_else_the_default_one(lg: LangGraph) -> None:
    headers = {"Authorization": f"Bearer {lg.key}"}
    async with httpx.AsyncClient(base_url=lg.url, headers=headers, timeout=20) as http:
        r = await http.post("/agencies", json={"name": "second"})
        assert r.status_code == 201, r.text
        second = r.json()["id"]
        r = await http.post("/agencies", json={"name": "third"})
        assert r.status_code == 201, r.text
    (worker,) = await lg.client.assistants.search(graph_id="worker")
    assert worker["metadata"]["agency_id"] == lg.agency, "the agency named default"
    url = f"{lg.url}/langgraph"
    async with get_client(url=url, api_key=lg.key, headers={"x-agency-id": second}) as there:
        (worker,) = await there.assistants.search(graph_id="worker")
        assert worker["metadata"]["agency_id"] == second
        thread = await there.threads.create(graph_id="worker")
        assert thread["metadata"]["agency_id"] == second
        assert [t["thread_id"] for t in await there.threads.search()] == [thread["thread_id"]]
    assert await lg.client.threads.search() == []
    async with get_client(url=url, api_key=lg.key, headers={"x-agency-id": "nosuch"}) as bad:
        with pytest.raises(NotFoundError, match="nosuch"):
            await bad.assistants.search()


async def test_a_thread_is_searched_and_listed_right_after_its_create(lg: LangGraph) -> None:
    """A create answers once the log has the thread; the search and the list right after it
    wait for the read models to have it."""
    headers = {"Authorization": f"Bearer {lg.key}"}
    created: list[str] = []
    async with httpx.AsyncClient(base_url=lg.url, headers=headers, timeout=20) as http:
        for i in range(12):
            thread = await lg.client.threads.create(graph_id="worker", metadata={"n": str(i)})
            thread_id = thread["thread_id"]
            created.append(thread_id)
            found = await lg.client.threads.search(metadata={"n": str(i)})
            assert [t["thread_id"] for t in found] == [thread_id], f"create {i}"
            assert (await lg.client.threads.get(thread_id))["status"] == "idle"
            r = await http.get(f"/agency/{lg.agency}/agents")
            assert r.status_code == 200, r.text
            assert thread_id in {t["id"] for t in r.json()}, f"create {i}"
        again = await http.post(
            "/langgraph/threads", json={"thread_id": created[0], "metadata": {"graph_id": "worker"}}
        )
        assert again.status_code == 409, again.text
    listed = await lg.client.threads.search(limit=50)
    assert {t["thread_id"] for t in listed} == set(created)


async def test_a_thread_too_large_to_store_is_refused_with_the_reason(lg: LangGraph) -> None:
    with pytest.raises(BadRequestError, match="cannot be created") as refused:
        await lg.client.threads.create(graph_id="worker", metadata={"notes": "n" * 1_046_000})
    assert refused.value.response.status_code == 400
    assert await lg.client.threads.search(limit=5) == []


async def test_another_tenant_naming_a_thread_id_creates_its_own(lg: LangGraph) -> None:
    """A thread id is the tenant's own: another tenant creating a thread of that id gets a
    thread of its own, empty, and the first tenant's is untouched."""
    key = "lg-own-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="private answer")])
    mine = await lg.client.threads.create(graph_id="worker", metadata={"user": "ann"})
    thread_id = mine["thread_id"]
    await lg.client.runs.wait(
        thread_id, "worker", input={"messages": [{"role": "user", "content": key}]}
    )
    other_key, _, _ = await new_tenant(lg.url, "intruder")
    async with get_client(url=f"{lg.url}/langgraph", api_key=other_key) as other:
        theirs = await other.threads.create(thread_id=thread_id, graph_id="worker")
        assert theirs["thread_id"] == thread_id and theirs["metadata"].get("user") is None
        state = await other.threads.get_state(thread_id)
        assert state["values"].get("messages", []) == []
        assert [t["thread_id"] for t in await other.threads.search()] == [thread_id]
    kept = await lg.client.threads.get_state(thread_id)
    assert kept["values"]["messages"][-1]["content"] == "private answer"
    assert [t["thread_id"] for t in await lg.client.threads.search()] == [thread_id]
    (listed,) = await lg.client.threads.search()
    assert listed["metadata"]["user"] == "ann"


async def test_another_tenant_naming_a_kept_agency_and_blueprint_finds_neither(
    lg: LangGraph,
) -> None:
    """What a create found is kept per tenant: once this tenant's agency and blueprint are
    kept, another tenant naming that agency id (its own key, the `x-agency-id` header) or
    that blueprint still gets 404."""
    headers = {"Authorization": f"Bearer {lg.key}"}
    async with httpx.AsyncClient(base_url=lg.url, headers=headers, timeout=20) as http:
        r = await http.post(f"/agency/{lg.agency}/blueprints", json={"name": "kept-own"})
        assert r.status_code == 201, r.text
    named = {"x-agency-id": lg.agency}
    async with get_client(url=f"{lg.url}/langgraph", api_key=lg.key, headers=named) as mine:
        await mine.threads.create(graph_id="kept-own")  # the agency and blueprint kept
    other_key, _, _ = await new_tenant(lg.url, "intruder")
    async with get_client(url=f"{lg.url}/langgraph", api_key=other_key, headers=named) as other:
        with pytest.raises(NotFoundError, match=f"agency {lg.agency} not found"):
            await other.threads.create(graph_id="kept-own")
    async with get_client(url=f"{lg.url}/langgraph", api_key=other_key) as other:
        with pytest.raises(NotFoundError, match="assistant 'kept-own' not found"):
            await other.threads.create(graph_id="kept-own")
    async with httpx.AsyncClient(
        base_url=lg.url, headers={"Authorization": f"Bearer {other_key}"}, timeout=20
    ) as http:
        r = await http.post(f"/agency/{lg.agency}/agents", json={"agentType": "kept-own"})
        assert r.status_code == 404, r.text
