"""The LangGraph store: a tenant's namespaced items, facts on the log.

A put is a `store.item_put` and a delete a `store.item_deleted` on the item's own
aggregate (`contracts/events/store.py`), appended by the API; the answer waits (bounded)
for the `store_items` read model to have it, so a get right after a put finds it. Reads
come from `store_items` under the tenant's row-level security; expired items (`ttl`
minutes after their put) are left out. Semantic search (`index`, `query`) embeds through
the model `AGENCY_STORE_EMBEDDINGS` names (`embeddings.py`); without it, both are refused
naming the setting.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

import asyncpg
import msgspec
from litestar import Request, delete, get, put
from litestar.exceptions import ValidationException
from litestar.params import JSONBody, QueryParameter

from agency.contracts.events import StoreItemDeleted, StoreItemPut, store_item_id
from agency.contracts.partitions import partition_of_subject
from agency.infra.jetstream.errors import EventTooLarge, InvalidEvent
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.auth import Caller, Deps, tenant_of
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph import embeddings
from agency.services.api.langgraph.answer import post_ok
from agency.services.api.langgraph.scope import AGENCY_HEADER, agency_for
from agency.services.api.langgraph.wire import Body, Out, Page
from agency.services.decide import decide_and_append

STORE_PROJECTION = "store_items"
MAX_LABELS = 20
MAX_TEXT = 1000
# Items a semantic search scores, at most (newest first).
MAX_CANDIDATES = 5000
_OPERATORS = {"$eq": "=", "$ne": "IS DISTINCT FROM", "$gt": ">", "$gte": ">=", "$lt": "<",
              "$lte": "<="}  # fmt: skip
_NOT_EXPIRED = "(expires_at IS NULL OR expires_at > now())"


class PutItem(Body, frozen=True, kw_only=True):
    namespace: list[str]
    key: str
    value: dict[str, Any]
    index: bool | list[str] | None = None
    ttl: float | None = None


class DeleteItem(Body, frozen=True, kw_only=True):
    namespace: list[str]
    key: str


class SearchItems(Page, frozen=True, kw_only=True):
    namespace_prefix: list[str] = msgspec.field(default_factory=list)
    filter: dict[str, Any] | None = None
    query: str | None = None
    refresh_ttl: bool | None = None


class ListNamespaces(Page, frozen=True, kw_only=True):
    prefix: list[str] | None = None
    suffix: list[str] | None = None
    max_depth: int | None = None
    limit: int = 100


class Item(Out, frozen=True, kw_only=True, omit_defaults=True):
    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    score: float | None = None


class SearchOut(Out, frozen=True, kw_only=True):
    items: list[Item]


class NamespacesOut(Out, frozen=True, kw_only=True):
    namespaces: list[list[str]]


def _namespace(labels: list[str], *, empty: bool = False) -> tuple[str, ...]:
    if not labels and not empty:
        raise ValidationException("namespace must name at least one label")
    if len(labels) > MAX_LABELS:
        raise ValidationException(f"namespace has {len(labels)} labels; at most {MAX_LABELS}")
    for label in labels:
        if not label or "." in label or len(label) > MAX_TEXT:
            raise ValidationException(
                f"namespace label {label[:60]!r} must be 1 to {MAX_TEXT} characters without '.'"
            )
    return tuple(labels)


def _key(key: str) -> str:
    if not key or len(key) > MAX_TEXT:
        raise ValidationException(f"key must be 1 to {MAX_TEXT} characters")
    return key


def _item(row: asyncpg.Record, score: float | None = None) -> Item:
    return Item(
        namespace=list(row["namespace"]),
        key=row["key"],
        value=json.loads(row["value"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        score=score,
    )


async def _append(
    deps: ApiDeps,
    tenant: str,
    namespace: tuple[str, ...],
    key: str,
    decide: Any,
) -> None:
    """Append the item's decision, then wait (bounded) for `store_items` to have it."""
    try:
        result = await decide_and_append(
            deps.bus.store, tenant, "store", store_item_id(namespace, key), decide
        )
    except (InvalidEvent, EventTooLarge) as e:
        raise ValidationException(f"the item cannot be stored: {e}") from e
    if result.events:
        await deps.progress.wait_passed(
            (STORE_PROJECTION,),
            result.events[-1].stream_seq,
            deps.settings.read_your_writes_timeout,
            partition=partition_of_subject(result.events[-1].subject),
        )


async def _tenant(principal: Any, deps: ApiDeps, request: Request[Any, Any, Any]) -> str:
    """The caller's tenant: the store is the tenant's, shared by its agencies; an agency
    named (`x-agency-id`) must still be the tenant's."""
    tenant = tenant_of(principal)
    if request.headers.get(AGENCY_HEADER):
        await agency_for(deps, tenant, request)
    return tenant


async def _addressed(
    principal: Any, deps: ApiDeps, request: Request[Any, Any, Any], item: PutItem | DeleteItem
) -> tuple[str, tuple[str, ...], str]:
    """The caller's tenant and the item's namespace and key, each checked."""
    return await _tenant(principal, deps, request), _namespace(item.namespace), _key(item.key)


def _stored(history: list[RecordedEvent]) -> bool:
    return bool(history) and isinstance(history[-1].payload, StoreItemPut)


@put("/store/items", status_code=204, summary="LangGraph: put a store item")
async def put_item(
    data: JSONBody[PutItem], principal: Caller, deps: Deps, request: Request[Any, Any, Any]
) -> None:
    tenant, namespace, key = await _addressed(principal, deps, request, data)
    embedding = None
    if data.index is not False and (data.index or embeddings.model() is not None):
        fields = data.index if isinstance(data.index, list) else None
        (embedding,) = await embeddings.embed([embeddings.indexed_text(data.value, fields)])
    if data.ttl is not None and not 0 < data.ttl <= 60 * 24 * 365 * 100:
        raise ValidationException("ttl is minutes: more than 0")
    event = StoreItemPut(
        namespace=namespace, key=key, value=data.value, ttl_minutes=data.ttl, embedding=embedding
    )
    await _append(deps, tenant, namespace, key, lambda _history: [event])


@delete("/store/items", status_code=204, summary="LangGraph: delete a store item")
async def delete_item(
    data: JSONBody[DeleteItem], principal: Caller, deps: Deps, request: Request[Any, Any, Any]
) -> None:
    tenant, namespace, key = await _addressed(principal, deps, request, data)
    deleted = StoreItemDeleted(namespace=namespace, key=key)
    await _append(
        deps, tenant, namespace, key, lambda history: [deleted] if _stored(history) else []
    )


@get("/store/items", summary="LangGraph: a store item")
async def get_item(
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, Any],
    namespace: Annotated[str | None, QueryParameter(name="namespace", required=False)] = None,
    key: Annotated[str | None, QueryParameter(name="key", required=False)] = None,
    refresh_ttl: Annotated[bool | None, QueryParameter(name="refresh_ttl", required=False)] = None,
) -> Item | None:
    """The item, or null; `refresh_ttl` is ignored (a TTL counts from the put)."""
    tenant = await _tenant(principal, deps, request)
    if namespace is None or key is None:
        raise ValidationException("name the item: query parameters `namespace` and `key`")
    labels = _namespace(namespace.split(".") if namespace else [])
    async with deps.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT * FROM store_items WHERE tenant_id = $1 AND namespace = $2 AND key = $3 "
            f"AND {_NOT_EXPIRED}",
            tenant,
            list(labels),
            _key(key),
        )
    return _item(row) if row is not None else None


def _filters(wanted: dict[str, Any], args: list[Any]) -> list[str]:
    """SQL conditions on the item's value: a field equal to a JSON value, or compared with
    `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`."""
    clauses = []
    for field, condition in wanted.items():
        tests = (
            condition.items()
            if isinstance(condition, dict) and condition and set(condition) <= set(_OPERATORS)
            else [("$eq", condition)]
        )
        for op, operand in tests:
            args += [field, json.dumps(operand)]
            clauses.append(f"value -> ${len(args) - 1} {_OPERATORS[op]} ${len(args)}::jsonb")
    return clauses


@post_ok("/store/items/search", summary="LangGraph: search store items")
async def search_items(
    data: JSONBody[SearchItems], principal: Caller, deps: Deps, request: Request[Any, Any, Any]
) -> SearchOut:
    """Items under `namespace_prefix` whose value matches `filter`, latest put first."""
    tenant = await _tenant(principal, deps, request)
    data.checked()
    query = (await embeddings.embed([data.query]))[0] if data.query else None
    prefix = _namespace(data.namespace_prefix, empty=True)
    args: list[Any] = [tenant, list(prefix)]
    clauses = ["tenant_id = $1", "namespace[1:cardinality($2::text[])] = $2", _NOT_EXPIRED]
    clauses += _filters(data.filter or {}, args)
    if query is not None:
        # Ranked by similarity: every candidate read (bounded), scored, then paged.
        clauses.append("embedding IS NOT NULL")
        args += [MAX_CANDIDATES, 0]
    else:
        args += [data.limit, data.offset]
    async with deps.pool.acquire() as conn:
        rows = await conn.fetch(
            f"SELECT * FROM store_items WHERE {' AND '.join(clauses)} "
            f"ORDER BY updated_at DESC, namespace, key LIMIT ${len(args) - 1} OFFSET ${len(args)}",
            *args,
        )
    if query is None:
        return SearchOut(items=[_item(r) for r in rows])
    scored = sorted(
        ((embeddings.cosine(query, r["embedding"]), r) for r in rows), key=lambda p: -p[0]
    )[data.offset : data.offset + data.limit]
    return SearchOut(items=[_item(r, score) for score, r in scored])


def _fits(namespace: tuple[str, ...], pattern: list[str] | None, *, at_end: bool) -> bool:
    if not pattern:
        return True
    if len(pattern) > len(namespace):
        return False
    part = namespace[-len(pattern) :] if at_end else namespace[: len(pattern)]
    return all(p in ("*", n) for p, n in zip(pattern, part, strict=True))


@post_ok("/store/namespaces", summary="LangGraph: list store namespaces")
async def list_namespaces(
    data: JSONBody[ListNamespaces], principal: Caller, deps: Deps, request: Request[Any, Any, Any]
) -> NamespacesOut:
    """Namespaces holding items, matching `prefix` and `suffix` (`*` matches any label),
    cut to `max_depth` labels, sorted."""
    tenant = await _tenant(principal, deps, request)
    data.checked()
    if data.max_depth is not None and data.max_depth < 1:
        raise ValidationException("max_depth must be 1 or more")
    async with deps.pool.acquire() as conn:
        rows = await conn.fetch(
            f"SELECT DISTINCT namespace FROM store_items WHERE tenant_id = $1 AND {_NOT_EXPIRED}",
            tenant,
        )
    found = set()
    for row in rows:
        namespace = tuple(row["namespace"])
        if _fits(namespace, data.prefix, at_end=False) and _fits(
            namespace, data.suffix, at_end=True
        ):
            found.add(namespace[: data.max_depth] if data.max_depth else namespace)
    ordered = sorted(found)[data.offset : data.offset + data.limit]
    return NamespacesOut(namespaces=[list(n) for n in ordered])


STORE_ROUTES = [put_item, delete_item, get_item, search_items, list_namespaces]
