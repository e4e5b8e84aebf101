"""A subagent tree's own aggregate (`tenant.<t>.evt.tree.<root thread id>`): the
threads admitted into it and the stops of its parts.

Every spawn in a tree is admitted here before its child exists, one append at a time
(optimistic concurrency on the aggregate), so its depth, its fan-out and its size are
decided from the log, whichever runtime process decides, however many spawn at once. A
stop is recorded here too: a spawn decided after it is refused, and the threads admitted
before it are the ones it ends.
"""

from __future__ import annotations

from typing import Literal

from agency.contracts.events.base import Event

StopMode = Literal["terminate", "cancel"]


class TreeThreadAdmitted(Event, frozen=True, kw_only=True, tag="tree.thread_admitted"):
    """`thread_id` may be created as a child of `parent_thread_id`, at `depth` (the root's
    children are at 1), asked for by `tool_call_id` of the parent's run `run_id`."""

    thread_id: str
    parent_thread_id: str
    depth: int
    run_id: str
    tool_call_id: str


class TreeStopped(Event, frozen=True, kw_only=True, tag="tree.stopped"):
    """`thread_id` and every thread below it were stopped: terminated for good
    (`terminate`), or their runs canceled (`cancel`: the runs under way then spawn no
    more; later runs may)."""

    thread_id: str
    mode: StopMode
    reason: str = ""


TreeEvent = TreeThreadAdmitted | TreeStopped
