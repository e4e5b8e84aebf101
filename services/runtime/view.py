"""The runtime's side of the middleware API: the context its own steps keep beside the one
hooks see, with the thread's state as the runtime holds it (`services.threads.view`
makes what hooks see of it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agency.domain.thread_state import ThreadState
from agency.services.agents.middleware import MiddlewareContext
from agency.services.threads.view import thread_view


@dataclass
class StepContext(MiddlewareContext):
    """A step's middleware context, with the thread's state as the runtime holds it
    (`thread`), which hooks never see. `observe` moves both on together."""

    thread: ThreadState = field(kw_only=True)

    def observe(self, thread: ThreadState) -> None:
        """The thread as it is now, for the hooks that follow."""
        self.thread = thread
        self.state = thread_view(thread)
