"""The store: a tenant's namespaced items (LangGraph's `BaseStore`), as facts on the log.

One item is one aggregate (`tenant.<t>.evt.store.<id>`, the id a digest of its
namespace and key, `store_item_id`), so an item's puts and deletes are ordered and a
replay or an export carries the store like everything else. The `store_items` read model
serves reads.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agency.contracts.events.base import Event


def store_item_id(namespace: tuple[str, ...], key: str) -> str:
    """The aggregate id of the item `key` in `namespace`: a digest, so any text fits."""
    joined = "\x1f".join((*namespace, "\x1e", key))
    return "si_" + hashlib.sha256(joined.encode()).hexdigest()[:48]


class StoreItemPut(Event, frozen=True, kw_only=True, tag="store.item_put"):
    """The item's value, replacing any before it. With `ttl_minutes`, it expires that long
    after this event. `embedding`: the vector of its indexed text, for semantic search
    (computed once, at the put, so a replay calls no model)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    ttl_minutes: float | None = None
    embedding: tuple[float, ...] | None = None


class StoreItemDeleted(Event, frozen=True, kw_only=True, tag="store.item_deleted"):
    namespace: tuple[str, ...]
    key: str


StoreEvent = StoreItemPut | StoreItemDeleted
