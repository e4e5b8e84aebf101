"""The store through the official SDK client: items put, read, searched, deleted, expired,
each put and delete a fact on the log, each tenant's items its own."""

from __future__ import annotations

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import BadRequestError

from agency.infra.jetstream.connection import Bus
from tests.helpers import assert_eventually
from tests.langgraph.conftest import LangGraph, new_tenant


async def test_put_get_search_delete(lg: LangGraph) -> None:
    store = lg.client.store
    await store.put_item(["users", "ann", "prefs"], "theme", {"color": "blue", "size": 3})
    await store.put_item(["users", "ann", "prefs"], "font", {"color": "red", "size": 5})
    await store.put_item(["users", "bob"], "theme", {"color": "blue", "size": 1})
    got = await store.get_item(["users", "ann", "prefs"], "theme")
    assert got is not None and got["value"] == {"color": "blue", "size": 3}
    assert got["namespace"] == ["users", "ann", "prefs"] and got["key"] == "theme"
    assert await store.get_item(["users", "ann", "prefs"], "nosuch") is None

    await store.put_item(["users", "ann", "prefs"], "theme", {"color": "green", "size": 3})
    got = await store.get_item(["users", "ann", "prefs"], "theme")
    assert got is not None and got["value"]["color"] == "green"
    assert got["created_at"] <= got["updated_at"]

    everyone = await store.search_items(["users"], limit=10)
    assert {(*i["namespace"], i["key"]) for i in everyone["items"]} == {
        ("users", "ann", "prefs", "theme"),
        ("users", "ann", "prefs", "font"),
        ("users", "bob", "theme"),
    }
    assert len(everyone["items"]) == 3
    ann = await store.search_items(["users", "ann"])
    assert {i["key"] for i in ann["items"]} == {"theme", "font"}
    blue = await store.search_items(["users"], filter={"color": "blue"})
    assert [i["namespace"] for i in blue["items"]] == [["users", "bob"]]
    big = await store.search_items(["users"], filter={"size": {"$gte": 3}})
    assert {i["key"] for i in big["items"]} == {"theme", "font"}
    page = await store.search_items(["users"], limit=1, offset=1)
    assert len(page["items"]) == 1

    spaces = await store.list_namespaces()
    assert spaces["namespaces"] == [["users", "ann", "prefs"], ["users", "bob"]]
    assert (await store.list_namespaces(prefix=["users", "*"], max_depth=2))["namespaces"] == [
        ["users", "ann"],
        ["users", "bob"],
    ]
    assert (await store.list_namespaces(suffix=["prefs"]))["namespaces"] == [
        ["users", "ann", "prefs"]
    ]

    await store.delete_item(["users", "ann", "prefs"], "theme")
    assert await store.get_item(["users", "ann", "prefs"], "theme") is None
    await store.delete_item(["users", "ann", "prefs"], "theme")  # gone already: nothing


async def test_puts_and_deletes_are_events_on_the_log(lg: LangGraph, bus: Bus) -> None:
    from agency.contracts.events import store_item_id

    await lg.client.store.put_item(["logged"], "k", {"n": 1})
    await lg.client.store.put_item(["logged"], "k", {"n": 2})
    await lg.client.store.delete_item(["logged"], "k")
    events = await bus.store.read(lg.tenant, "store", store_item_id(("logged",), "k"))
    assert [e.type for e in events] == ["store.item_put", "store.item_put", "store.item_deleted"]


async def test_an_item_expires_after_its_ttl(lg: LangGraph) -> None:
    await lg.client.store.put_item(["short"], "k", {"n": 1}, ttl=0.02)  # 1.2 s
    assert await lg.client.store.get_item(["short"], "k") is not None

    async def expired() -> None:
        assert await lg.client.store.get_item(["short"], "k") is None

    await assert_eventually(expired, timeout=10)
    assert (await lg.client.store.search_items(["short"]))["items"] == []
    assert (await lg.client.store.list_namespaces(prefix=["short"]))["namespaces"] == []


async def test_bad_input_and_search_without_embeddings_are_refused_with_the_reason(
    lg: LangGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENCY_STORE_EMBEDDINGS", raising=False)
    with pytest.raises(BadRequestError, match="AGENCY_STORE_EMBEDDINGS"):
        await lg.client.store.search_items(["users"], query="what does ann like")
    with pytest.raises(BadRequestError, match="AGENCY_STORE_EMBEDDINGS"):
        await lg.client.store.put_item(["docs"], "k", {"text": "x"}, index=["text"])
    with pytest.raises(BadRequestError, match="at least one label"):
        await lg.client.store.put_item([], "k", {"n": 1})
    with pytest.raises(BadRequestError, match="limit"):
        await lg.client.store.search_items(["users"], limit=0)
    with pytest.raises(BadRequestError, match="ttl"):
        await lg.client.store.put_item(["x"], "k", {"n": 1}, ttl=-1)


async def test_semantic_search_ranks_by_the_embeddings_model(
    lg: LangGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENCY_PROVIDER_VLLM_BASE_URL", lg.llm.base_url)
    monkeypatch.setenv("AGENCY_STORE_EMBEDDINGS", "vllm:fake-embed")
    store = lg.client.store
    await store.put_item(["mem"], "a", {"text": "ann likes green tea", "n": 1}, index=["text"])
    await store.put_item(["mem"], "b", {"text": "bob plays chess on sundays"})
    await store.put_item(["mem"], "c", {"text": "not indexed tea"}, index=False)
    found = await store.search_items(["mem"], query="which tea does ann like")
    assert [i["key"] for i in found["items"]] == ["a", "b"]
    assert found["items"][0]["score"] > found["items"][1]["score"]
    chess = await store.search_items(["mem"], query="chess", limit=1)
    assert [i["key"] for i in chess["items"]] == ["b"]
    filtered = await store.search_items(["mem"], query="tea", filter={"n": 1})
    assert [i["key"] for i in filtered["items"]] == ["a"]


async def test_another_tenant_sees_none_of_our_items(lg: LangGraph) -> None:
    await lg.client.store.put_item(["secret"], "k", {"pin": "1234"})
    key, _, _ = await new_tenant(lg.url, "lg-other")
    async with get_client(url=f"{lg.url}/langgraph", api_key=key) as other:
        assert await other.store.get_item(["secret"], "k") is None
        assert (await other.store.search_items([]))["items"] == []
        assert (await other.store.list_namespaces())["namespaces"] == []
        await other.store.delete_item(["secret"], "k")  # its own (absent) item
    assert await lg.client.store.get_item(["secret"], "k") is not None
