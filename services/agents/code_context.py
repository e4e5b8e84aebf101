"""What a code agent's `on_message` gets as `ctx`: the types an agent is written against.

The runtime makes the context (in its own process, or in an isolated agent's sandboxed
worker); an agent sees only these protocols: model access (`ctx.ai`), its tools
(`ctx.tools`), its reply (`ctx.reply`), its state and the abort signal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from agency.contracts.events import ChatMessage
from agency.services.agents.code_ai import StreamingAi
from agency.services.agents.tools import ToolSpec


class AgentReply(Protocol):
    """The agent's reply, streamed as `reply.*` events; its text is the run's result."""

    @property
    def text(self) -> str:
        """What was written so far."""
        ...

    def write(self, text: str) -> None:
        """Add `text` to the reply (streamed as `reply.delta`)."""

    def thinking(self, text: str) -> None:
        """Show `text` as the agent's thinking (`reply.thinking`), not part of the reply."""

    def action(self, name: str, args: Mapping[str, Any] | None = None) -> None:
        """Show an action the agent takes (`reply.action`)."""


class AgentTools(Protocol):
    """The tools of the agent's tags; each call makes the usual tool events."""

    @property
    def names(self) -> list[str]:
        """The names of the tools, sorted."""
        ...

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told of each tool."""
        ...

    async def call(self, name: str, args: Mapping[str, Any] | None = None) -> str:
        """Run a tool: its output, or `ToolCallError` with its error."""
        ...


class AgentContext(Protocol):
    """`ctx` of `CodeAgent.on_message`: the thread and run it answers, the agent's
    settings, the conversation so far, and how it acts (each effect an event of the
    thread)."""

    @property
    def thread_id(self) -> str:
        """The thread the message was sent to."""
        ...

    @property
    def run_id(self) -> str:
        """The run answering the message."""
        ...

    @property
    def agent_type(self) -> str:
        """The name the agent was registered under (`AgentSystem.code_agent`)."""
        ...

    @property
    def settings(self) -> Any:
        """The run's settings: an instance of the agent's `Settings`, or a mapping."""
        ...

    @property
    def conversation(self) -> tuple[ChatMessage, ...]:
        """The thread's messages before this one."""
        ...

    @property
    def ai(self) -> StreamingAi:
        """Model calls (`complete`, `generate`, `stream`), each recorded as events."""
        ...

    @property
    def tools(self) -> AgentTools:
        """The agent's tools."""
        ...

    @property
    def reply(self) -> AgentReply:
        """The reply being written."""
        ...

    @property
    def state(self) -> Any:
        """The agent's state: the last value given to `set_state` on this thread."""
        ...

    async def set_state(self, value: Any) -> None:
        """Replace the agent's state (any JSON value), recorded as `agent.state_set`."""
        ...

    @property
    def log(self) -> Any:
        """A structlog logger bound to the thread and run."""
        ...

    @property
    def aborted(self) -> bool:
        """True once the run was canceled or its drive stopped: the agent's task is then
        cancelled."""
        ...

    @property
    def abort_signal(self) -> asyncio.Event:
        """Set when `aborted` turns true."""
        ...
