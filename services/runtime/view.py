"""The runtime's side of the middleware API: the read-only `ThreadView` it makes of a
thread's folded state for middleware and state tools, and the context its own steps keep
beside the one hooks see."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from domain.thread_state import ThreadState
from services.agents.middleware import MiddlewareContext
from services.agents.view import ChildView, ThreadView


def thread_view(state: ThreadState) -> ThreadView:
    """What middleware sees of the thread `state` is."""
    return ThreadView(
        tenant_id=state.tenant_id,
        thread_id=state.thread_id,
        agency_id=state.agency_id,
        agent_type=state.agent_type,
        model=state.model,
        parent=state.parent,
        messages=state.messages,
        files=state.files,
        read_paths=state.read_paths,
        todos=state.todos,
        children=tuple(
            ChildView(
                reference=c.reference,
                subagent_type=c.subagent_type,
                name=c.name,
                title=c.title,
                description=c.description,
                status=c.status,
                status_text=c.status_text,
                blocking=c.blocking,
                resumable=c.resumable,
            )
            for c in state.children
        ),
        registered_tools=frozenset(state.registered_tools),
        side=state.side,
        variables=functools.cache(state.scoped_env),
    )


@dataclass
class StepContext(MiddlewareContext):
    """A step's middleware context, with the thread's state as the runtime holds it
    (`thread`), which hooks never see. `observe` moves both on together."""

    thread: ThreadState = field(kw_only=True)

    def observe(self, thread: ThreadState) -> None:
        """The thread as it is now, for the hooks that follow."""
        self.thread = thread
        self.state = thread_view(thread)
