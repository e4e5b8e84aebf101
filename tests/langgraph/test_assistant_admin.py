"""Assistants created, updated, versioned and deleted through the official SDK client."""

from __future__ import annotations

import pytest
from langgraph_sdk.errors import APIStatusError, BadRequestError, ConflictError, NotFoundError

from tests.langgraph.conftest import LangGraph, new_tenant


async def test_create_update_versions_set_latest_and_delete(lg: LangGraph) -> None:
    made = await lg.client.assistants.create(
        "worker", assistant_id="zed-helper", name="Zed", description="first"
    )
    assert made["assistant_id"] == "zed-helper" and made["graph_id"] == "zed-helper"
    assert made["name"] == "Zed" and made["description"] == "first"
    assert made["version"] == 1 and made["metadata"]["source"] == "dynamic"
    again = await lg.client.assistants.create(
        "worker", assistant_id="zed-helper", if_exists="do_nothing"
    )
    assert again["version"] == 1
    with pytest.raises(ConflictError, match="already exists"):
        await lg.client.assistants.create("worker", assistant_id="zed-helper")

    updated = await lg.client.assistants.update("zed-helper", description="second")
    assert updated["version"] == 2 and updated["description"] == "second"
    versions = await lg.client.assistants.get_versions("zed-helper")
    assert [(v["version"], v["description"]) for v in versions] == [(2, "second"), (1, "first")]

    latest = await lg.client.assistants.set_latest("zed-helper", 1)
    assert latest["version"] == 3 and latest["description"] == "first"
    assert (await lg.client.assistants.get("zed-helper"))["description"] == "first"
    assert (await lg.client.assistants.set_latest("zed-helper", 3))["version"] == 3  # as it is
    assert await lg.client.assistants.set_latest("worker", 1) == await lg.client.assistants.get(
        "worker"
    )
    with pytest.raises(NotFoundError, match="no version 9"):
        await lg.client.assistants.set_latest("zed-helper", 9)

    assert await lg.client.assistants.count(graph_id="zed-helper") == 1
    assert await lg.client.assistants.count(name="ZED") == 1
    total = await lg.client.assistants.count()
    assert total == len(await lg.client.assistants.search(limit=100))

    # A thread and a run of the new assistant.
    thread = await lg.client.threads.create(graph_id="zed-helper")
    assert thread["metadata"]["graph_id"] == "zed-helper"

    await lg.client.assistants.delete("zed-helper")
    with pytest.raises(NotFoundError):
        await lg.client.assistants.get("zed-helper")
    assert await lg.client.assistants.count() == total - 1
    with pytest.raises(NotFoundError):
        await lg.client.assistants.delete("zed-helper")


async def test_create_without_an_id_names_a_new_blueprint(lg: LangGraph) -> None:
    made = await lg.client.assistants.create("worker", name="My helper")
    assert made["assistant_id"].startswith("worker-") and made["name"] == "My helper"
    assert (await lg.client.assistants.get(made["assistant_id"]))["name"] == "My helper"


async def test_config_context_and_metadata_are_kept_per_version(lg: LangGraph) -> None:
    """Kept with the blueprint (its metadata) and read back: on create, merged (metadata)
    or replaced (config, context) on update, each version as it was saved."""
    made = await lg.client.assistants.create(
        "worker",
        assistant_id="kept-config",
        config={"configurable": {"tone": "dry"}, "recursion_limit": 12},
        context={"user_tier": "gold"},
        metadata={"team": "support", "level": 2},
    )
    assert made["config"] == {"configurable": {"tone": "dry"}, "recursion_limit": 12}
    assert made["context"] == {"user_tier": "gold"}
    assert made["metadata"]["team"] == "support" and made["metadata"]["level"] == 2
    assert "langgraph" not in made["metadata"] and made["metadata"]["source"] == "dynamic"
    updated = await lg.client.assistants.update(
        "kept-config", config={"configurable": {"tone": "warm"}}, metadata={"level": 3}
    )
    assert updated["config"] == {"configurable": {"tone": "warm"}}
    assert updated["context"] == {"user_tier": "gold"}  # not given: kept
    assert (updated["metadata"]["team"], updated["metadata"]["level"]) == ("support", 3)
    found = await lg.client.assistants.search(metadata={"team": "support"})
    assert [a["assistant_id"] for a in found] == ["kept-config"]
    versions = await lg.client.assistants.get_versions("kept-config")
    by_version = {v["version"]: v for v in versions}
    assert by_version[1]["config"]["configurable"] == {"tone": "dry"}
    assert by_version[1]["metadata"]["level"] == 2 and by_version[2]["metadata"]["level"] == 3
    # A thread of it runs as the blueprint runs: the config is kept, not read.
    thread = await lg.client.threads.create(graph_id="kept-config")
    assert (await lg.client.threads.get(thread["thread_id"]))["metadata"]["graph_id"] == (
        "kept-config"
    )


async def test_what_does_not_map_is_refused_with_the_reason(lg: LangGraph) -> None:
    with pytest.raises(BadRequestError, match="'langgraph' is reserved"):
        await lg.client.assistants.create("worker", metadata={"langgraph": 1})
    with pytest.raises(NotFoundError, match="graph 'nosuch' not found"):
        await lg.client.assistants.create("nosuch")
    with pytest.raises(BadRequestError, match="blueprint name"):
        await lg.client.assistants.create("worker", assistant_id="not a name")
    with pytest.raises(ConflictError, match="static blueprint"):
        await lg.client.assistants.delete("worker")
    with pytest.raises(ConflictError, match="static blueprint"):
        await lg.client.assistants.delete("worker", delete_threads=True)


async def test_delete_with_threads_erases_the_assistants_threads_only(lg: LangGraph) -> None:
    await lg.client.assistants.create("worker", assistant_id="brief-helper")
    doomed = [await lg.client.threads.create(graph_id="brief-helper") for _ in range(2)]
    kept = await lg.client.threads.create(graph_id="worker")
    await lg.client.assistants.delete("brief-helper", delete_threads=True)
    for thread in doomed:
        with pytest.raises(APIStatusError) as gone:
            await lg.client.threads.get(thread["thread_id"])
        assert gone.value.status_code == 410
    assert (await lg.client.threads.get(kept["thread_id"]))["thread_id"] == kept["thread_id"]
    with pytest.raises(NotFoundError):
        await lg.client.assistants.get("brief-helper")
    with pytest.raises(NotFoundError):
        await lg.client.assistants.delete("brief-helper", delete_threads=True)


async def test_graph_schemas_and_subgraphs(lg: LangGraph) -> None:
    graph = await lg.client.assistants.get_graph("worker")
    assert {n["id"] for n in graph["nodes"]} == {"__start__", "model", "tools", "__end__"}
    schemas = await lg.client.assistants.get_schemas("worker")
    assert schemas["graph_id"] == "worker"
    assert "messages" in schemas["state_schema"]["properties"]
    assert await lg.client.assistants.get_subgraphs("worker") == {}
    with pytest.raises(NotFoundError):
        await lg.client.assistants.get_graph("nosuch")


async def test_another_tenant_sees_no_assistant_of_ours(lg: LangGraph) -> None:
    await lg.client.assistants.create("worker", assistant_id="private-one")
    from langgraph_sdk import get_client

    key, _, _ = await new_tenant(lg.url, "lg-other")
    async with get_client(url=f"{lg.url}/langgraph", api_key=key) as other:
        with pytest.raises(NotFoundError):
            await other.assistants.get("private-one")
        with pytest.raises(NotFoundError):
            await other.assistants.get_versions("private-one")
        with pytest.raises(NotFoundError):
            await other.assistants.delete("private-one")
        assert await other.assistants.count(graph_id="private-one") == 0
