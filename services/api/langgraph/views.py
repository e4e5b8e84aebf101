"""The LangGraph views of the threads last read, kept folded.

A thread's view is folded from its whole log once; a later load reads only the events after
where the kept view stands and folds them on (the log is append-only: a stream that denies
purges, and events never change). A long conversation is then read in one small direct get
instead of from its start on every request. Each caller gets a copy of its own to fold on or
change; the least recently used views go first.
"""

from __future__ import annotations

from collections import OrderedDict

from agency.infra.jetstream.ports import AggregateStore
from agency.services.api.langgraph.graphstate import GraphView

# Views kept: a view holds its thread's messages, so this bounds the memory they take.
VIEWS_KEPT = 256


class GraphViews:
    def __init__(self, store: AggregateStore, capacity: int = VIEWS_KEPT) -> None:
        self._store = store
        self._capacity = capacity
        self._views: OrderedDict[tuple[str, str], GraphView] = OrderedDict()

    async def load(self, tenant: str, thread_id: str) -> GraphView:
        """The thread folded to the end of its log (`created` None when it has no
        `thread.created`), read on from the view kept, if any."""
        kept = self._views.get((tenant, thread_id))
        view = kept.copy() if kept is not None else GraphView(tenant_id=tenant, thread_id=thread_id)
        newer = await self._store.read(tenant, "thread", thread_id, after=view.position)
        for event in newer:
            view.apply(event)
        if kept is None or newer:
            self.keep(view)
        else:
            self._views.move_to_end((tenant, thread_id))
        return view

    def shed(self) -> int:
        """Drop every view kept (each is folded again from the log when next loaded); how
        many were dropped."""
        dropped = len(self._views)
        self._views.clear()
        return dropped

    def keep(self, view: GraphView) -> None:
        """Keep a copy of `view`, folded as far as a read of the log went."""
        if view.created is None:
            return
        key = (view.tenant_id, view.thread_id)
        self._views[key] = view.copy()
        self._views.move_to_end(key)
        while len(self._views) > self._capacity:
            self._views.popitem(last=False)
