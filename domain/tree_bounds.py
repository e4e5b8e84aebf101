"""Bounded subagent trees: pure decisions over a tree's aggregate (`contracts.events.tree`).

A spawn is admitted into its tree before its child exists (`admit`): refused when the
child would sit deeper than `max_depth`, when its parent has `max_children` children
already, when the tree holds `max_threads` threads (the root counted), or when a stop
covers the spawning run. The counts are the tree's admissions, so a spawn admitted but
never carried out (its run ended first) still counts: the bound errs on the safe side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from agency.contracts.events import (
    AnyEvent,
    Event,
    StopMode,
    TreeLimits,
    TreeStopped,
    TreeThreadAdmitted,
)
from agency.domain.child_naming import child_run_id

# The operator's maxima when the settings name none (docs/operations.md, "Limits").
DEFAULT_MAX_DEPTH = 5
DEFAULT_MAX_CHILDREN = 10
DEFAULT_MAX_THREADS = 50


class TreeBounds(msgspec.Struct, frozen=True, kw_only=True):
    """The bounds a spawn is held to."""

    max_depth: int = DEFAULT_MAX_DEPTH
    max_children: int = DEFAULT_MAX_CHILDREN
    max_threads: int = DEFAULT_MAX_THREADS

    def lowered(self, limits: TreeLimits | None) -> TreeBounds:
        """These bounds, each lowered by a blueprint's `limits` (never raised)."""
        if limits is None:
            return self
        return TreeBounds(
            max_depth=min(self.max_depth, limits.max_depth or self.max_depth),
            max_children=min(self.max_children, limits.max_children or self.max_children),
            max_threads=min(self.max_threads, limits.max_threads or self.max_threads),
        )


@dataclass
class TreeView:
    """A tree's aggregate folded: its admitted threads in order and its stops, each stop
    with the number of admissions recorded before it."""

    root: str
    admitted: dict[str, TreeThreadAdmitted] = field(default_factory=dict)
    stops: list[tuple[int, TreeStopped]] = field(default_factory=list)

    def depth(self, thread_id: str) -> int:
        found = self.admitted.get(thread_id)
        return found.depth if found is not None else 0

    def children(self, thread_id: str) -> int:
        return sum(1 for a in self.admitted.values() if a.parent_thread_id == thread_id)

    def threads(self) -> int:
        """The threads of the tree, the root included."""
        return 1 + len(self.admitted)

    def lineage(self, thread_id: str) -> list[str]:
        """`thread_id` and its ancestors up to the root."""
        line, seen = [thread_id], {thread_id}
        current = self.admitted.get(thread_id)
        while current is not None and current.parent_thread_id not in seen:
            line.append(current.parent_thread_id)
            seen.add(current.parent_thread_id)
            current = self.admitted.get(current.parent_thread_id)
        return line

    def below(self, thread_id: str) -> list[str]:
        """Every admitted thread under `thread_id`, in the order they were admitted."""
        return [t for t in self.admitted if t != thread_id and thread_id in self.lineage(t)]

    def terminated(self, thread_id: str) -> TreeStopped | None:
        """The terminate stop that covers `thread_id` (it or an ancestor), if any."""
        line = set(self.lineage(thread_id))
        for _, stop in self.stops:
            if stop.mode == "terminate" and stop.thread_id in line:
                return stop
        return None

    def canceled_run(self, thread_id: str, run_id: str) -> TreeStopped | None:
        """The cancel stop that covers the run `run_id` of `thread_id`: one over the thread
        recorded after the tree saw that run at work (it spawned before the stop) or after
        the thread's admission, when the run is the thread's first (started by the spawn)."""
        line = set(self.lineage(thread_id))
        order = list(self.admitted.values())
        for before, stop in self.stops:
            if stop.mode != "cancel" or stop.thread_id not in line:
                continue
            earlier = order[:before]
            if any(a.parent_thread_id == thread_id and a.run_id == run_id for a in earlier):
                return stop
            first = run_id == child_run_id(thread_id)
            if first and any(a.thread_id == thread_id for a in earlier):
                return stop
        return None

    def stopped_child(self, child: str) -> TreeStopped | None:
        """The stop a child admitted into the tree falls under: a terminate over it, or a
        cancel over it recorded after its admission (its spawning run was under way)."""
        admitted = self.admitted.get(child)
        if admitted is None:
            return None
        if (ended := self.terminated(child)) is not None:
            return ended
        index = list(self.admitted).index(child)
        line = set(self.lineage(child))
        for before, stop in self.stops:
            if stop.mode == "cancel" and stop.thread_id in line and before > index:
                return stop
        return None


def fold(root: str, history: Sequence[Event]) -> TreeView:
    view = TreeView(root=root)
    for event in history:
        match event:
            case TreeThreadAdmitted(thread_id=thread_id):
                view.admitted.setdefault(thread_id, event)
            case TreeStopped():
                view.stops.append((len(view.admitted), event))
    return view


def refusal(view: TreeView, parent: str, run_id: str, bounds: TreeBounds) -> str | None:
    """Why `parent`'s run `run_id` may not spawn one more child in this tree, or None."""
    if (ended := view.terminated(parent)) is not None:
        return (
            f"tree stopped: thread {ended.thread_id} was terminated; no subagent starts "
            "in its tree any more"
        )
    if (stop := view.canceled_run(parent, run_id)) is not None:
        return (
            f"tree stopped: the runs of thread {stop.thread_id} and its subagents were "
            "canceled; this run starts no more subagents"
        )
    depth = view.depth(parent) + 1
    if depth > bounds.max_depth:
        return (
            f"subagent refused: the depth limit (maxDepth) is {bounds.max_depth}, and a "
            f"subagent of this thread would be at depth {depth}; do the work yourself"
        )
    children = view.children(parent)
    if children >= bounds.max_children:
        return (
            f"subagent refused: the fan-out limit (maxChildren) is {bounds.max_children} "
            f"subagents per thread, and this thread has {children}; do the work yourself"
        )
    if view.threads() >= bounds.max_threads:
        return (
            f"subagent refused: the tree limit (maxThreads) is {bounds.max_threads} threads, "
            f"and this tree has {view.threads()}; do the work yourself"
        )
    return None


def admit(
    view: TreeView,
    *,
    parent: str,
    child: str,
    run_id: str,
    tool_call_id: str,
    bounds: TreeBounds,
) -> tuple[tuple[AnyEvent, ...], str | None]:
    """The events admitting `child` (none when it was admitted already) or the refusal."""
    if child in view.admitted:
        return (), None
    why = refusal(view, parent, run_id, bounds)
    if why is not None:
        return (), why
    admitted = TreeThreadAdmitted(
        thread_id=child,
        parent_thread_id=parent,
        depth=view.depth(parent) + 1,
        run_id=run_id,
        tool_call_id=tool_call_id,
    )
    return (admitted,), None


def stop(view: TreeView, thread_id: str, mode: StopMode, reason: str) -> tuple[AnyEvent, ...]:
    """The stop of `thread_id` and its part of the tree: a terminate once is enough."""
    if mode == "terminate" and view.terminated(thread_id) is not None:
        return ()
    return (TreeStopped(thread_id=thread_id, mode=mode, reason=reason),)
