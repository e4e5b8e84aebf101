"""What middleware and state tools see of a thread: a read-only view the runtime makes of
the thread's folded log for each hook, state tool call and `/state` request.

It holds what a thread is to its agent (the conversation, the files, the plan, the
subagents, the parent), never the runtime's own bookkeeping (log positions, idempotency
keys, queued requests), so middleware written against it keeps working as the runtime
changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from agency.contracts.events import ChatMessage, ParentRef, Todo


def _no_variables() -> Mapping[str, str]:
    return {}


@dataclass(frozen=True, slots=True)
class ChildView:
    """A subagent child in the thread's registry: `status` is where it is (`running`, its
    last outcome, or `terminated`), `status_text` what it last said about itself."""

    reference: str
    subagent_type: str
    name: str | None = None
    title: str | None = None
    description: str = ""
    status: str = "running"
    status_text: str = ""
    blocking: bool = True
    resumable: bool = False


@dataclass(frozen=True, slots=True)
class ThreadView:
    """A thread as its middleware sees it, read-only.

    `messages` is the conversation, `files` the thread's files as (path, content) pairs
    and `read_paths` those read since they were last written, `todos` its plan, `children`
    its subagents, `parent` where it reports to (None for a thread that is no subagent),
    `registered_tools` the names of the tools middleware registered on it, `side` the side
    holding the floor in a dual-AI session.
    """

    tenant_id: str
    thread_id: str
    agency_id: str = ""
    agent_type: str = ""
    model: str = ""
    parent: ParentRef | None = None
    messages: tuple[ChatMessage, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    read_paths: frozenset[str] = frozenset()
    todos: tuple[Todo, ...] = ()
    children: tuple[ChildView, ...] = ()
    registered_tools: frozenset[str] = frozenset()
    side: Literal["A", "B"] | None = None
    variables: Callable[[], Mapping[str, str]] = field(
        default=_no_variables, repr=False, compare=False
    )

    def file(self, path: str) -> str | None:
        """The content of the file at `path`, or None when the thread has none there."""
        return next((content for p, content in self.files if p == path), None)

    def child(self, reference: str) -> ChildView | None:
        """The child of this reference, or None."""
        return next((entry for entry in self.children if entry.reference == reference), None)

    def scoped_env(self) -> dict[str, str]:
        """The thread's scoped variables: runtime-only data for middleware and state tools
        (`immediate.scoped_env`), never shown to a model."""
        return dict(self.variables())
