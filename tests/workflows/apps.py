"""An agent system that differs from the recorded one inside workflows, for re-execution
to catch (`--app`)."""

from __future__ import annotations

from agency.services.agents.system import AgentSystem
from tests.replay.apps import AuditMiddleware
from tests.runtime.conftest import make_system


def with_audit() -> AgentSystem:
    """One more middleware hook around each model call of every workflow member."""
    return make_system().use(AuditMiddleware(), ["workflow"])
