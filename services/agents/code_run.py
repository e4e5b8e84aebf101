"""What a code agent's `ctx` (`services.agents.AgentContext`) is alike in the runtime and
in a sandboxed worker: what it is told of its run, its logger, and whether the run was
aborted."""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass
from typing import Any

from agency.contracts.events import ChatMessage


@dataclass
class RunContextBasics(abc.ABC):
    """What `ctx` is told of its run, and its logger and abort flag (`abort_signal`)."""

    thread_id: str
    run_id: str
    agent_type: str
    settings: Any
    conversation: tuple[ChatMessage, ...]

    @property
    def log(self) -> Any:
        """A structlog logger bound to the thread and run (in a sandboxed worker, writing
        to the worker's stderr)."""
        import structlog  # the worker imports it only when the agent logs

        return structlog.get_logger("agency.code_agent").bind(
            agent_type=self.agent_type, thread_id=self.thread_id, run_id=self.run_id
        )

    @property
    def aborted(self) -> bool:
        """True once the run was canceled or its drive stopped (shutdown, a lost lease):
        the agent's task is then cancelled (in a sandboxed worker, the worker is killed,
        so the agent never sees this turn true)."""
        return self.abort_signal.is_set()

    @property
    @abc.abstractmethod
    def abort_signal(self) -> asyncio.Event:
        """Set when the run is aborted."""
