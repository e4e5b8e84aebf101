"""The read-only `ThreadView` middleware and state tools are given of a thread's folded
state: made by the runtime for its hooks and by the API for `/state`'s middleware parts."""

from __future__ import annotations

import dataclasses
import functools

from agency.domain.thread_state import ThreadState
from agency.infra.sealing import unseal
from agency.services.agents.builtin.filesystem import READ_FILE
from agency.services.agents.view import ChildView, ThreadView

_CHILD_FIELDS = tuple(f.name for f in dataclasses.fields(ChildView))


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
        read_paths=frozenset(path for tool, path in state.tool_paths if tool == READ_FILE),
        todos=state.todos,
        # Each child as its registry entry has it, in the fields middleware are shown.
        children=tuple(
            ChildView(**{name: getattr(c, name) for name in _CHILD_FIELDS}) for c in state.children
        ),
        registered_tools=frozenset(state.registered_tools),
        side=state.side,
        variables=functools.cache(functools.partial(unseal, state.sealed_env)),
    )
