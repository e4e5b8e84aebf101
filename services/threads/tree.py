"""A subagent tree: a thread and, recursively, the threads whose `thread.created` names it
as parent, with their histories interleaved in the order the log recorded them."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from nats.aio.client import Client as NATS

from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.records import RecordedEvent
from agency.services.threads.reads import Creation, read_thread, thread_creations


@dataclass(frozen=True, slots=True)
class TreeNode:
    thread_id: str
    parent_id: str | None
    depth: int
    events: tuple[RecordedEvent, ...]


@dataclass(frozen=True, slots=True)
class ThreadTree:
    """Nodes in pre-order: a parent before its children, siblings by creation."""

    root: str
    nodes: tuple[TreeNode, ...]

    def node(self, thread_id: str) -> TreeNode:
        for node in self.nodes:
            if node.thread_id == thread_id:
                return node
        raise KeyError(thread_id)

    def interleaved(self) -> Iterator[tuple[TreeNode, RecordedEvent]]:
        """Every event of the tree in stream order: a child's events fall between the
        parent events that caused them and the parent events they caused."""
        streams = [[(e.stream_seq, i, e) for e in node.events] for i, node in enumerate(self.nodes)]
        for _, index, event in heapq.merge(*streams):
            yield self.nodes[index], event


def descendants(
    creations: Sequence[Creation], root: str, *, created_until: int | None = None
) -> list[tuple[str, str, int]]:
    """(thread id, parent id, depth) of every descendant of `root`, in pre-order."""
    children: dict[str, list[Creation]] = {}
    for c in creations:
        if c.parent_id is not None and (created_until is None or c.stream_seq <= created_until):
            children.setdefault(c.parent_id, []).append(c)
    found: list[tuple[str, str, int]] = []
    seen = {root}
    stack = [(c, root, 1) for c in reversed(children.get(root, []))]
    while stack:
        creation, parent, depth = stack.pop()
        if creation.thread_id in seen:
            continue  # a parent link cycle is not a tree; never loop on forged data
        seen.add(creation.thread_id)
        found.append((creation.thread_id, parent, depth))
        kids = children.get(creation.thread_id, [])
        stack.extend((c, creation.thread_id, depth + 1) for c in reversed(kids))
    return found


async def load_tree(store: EventStore, nc: NATS, tenant_id: str, root: str) -> ThreadTree:
    root_events = await read_thread(store, tenant_id, root)
    # Children are created after their parent: the scan starts at the root's creation.
    creations = await thread_creations(
        nc, tenant_id, start_seq=root_events[0].stream_seq, layout=store.layout
    )
    nodes = [TreeNode(root, None, 0, tuple(root_events))]
    for thread_id, parent, depth in descendants(creations, root):
        events = await store.read(tenant_id, "thread", thread_id)
        nodes.append(TreeNode(thread_id, parent, depth, tuple(events)))
    return ThreadTree(root=root, nodes=tuple(nodes))
