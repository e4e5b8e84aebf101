"""Remote agents as agent tools: offered to the model, called for the tools service.

`RemoteAgentCatalog.tools(agents)` answers one tool per remote agent a blueprint names,
named as the agent is (`RemoteAgent.name`), taking a `message`; its description is the
blueprint's, else the card's, followed by the card's skills. The card is read at the start
of a run (within the cards' timeout, through the egress rule); an agent whose card cannot
be read is still offered, with the blueprint's description, and a call to it answers with
the reason, so the model learns why and the run goes on.

`remote_agent_tool(cards, agent, conversation)` is the tool the tools service runs for a
`tool.requested` carrying `remote_agent`: it sends the message in `conversation` (the
thread's remote `contextId` for that agent, if it has one, and the task that asked for
input, if one did) and records where the agent answered. A failure (unreachable, refused
by the egress rule, the agent's error, no answer within the agent's timeout) is
`ToolFailed`, one `tool.error` the model reads. The message is sent once (its id is
derived from the call's, so an agent that keys on it, as Agency's does, does not run it
twice).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import msgspec
import structlog
from a2a.types import AgentCard

from agency.contracts.events import RemoteAgent
from agency.services.a2aclient.calls import Conversation, send
from agency.services.a2aclient.cards import RemoteAgentError, RemoteCards
from agency.services.agents.tools import Tool, ToolContext, ToolFailed, ToolSpec

log = structlog.get_logger(__name__)

MESSAGE = "message"
_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        MESSAGE: {
            "type": "string",
            "description": "What to ask or tell the agent; a later call continues the same "
            "conversation with it.",
        }
    },
    "required": [MESSAGE],
    "additionalProperties": False,
}
RETRY_AFTER = 30.0
# The runtime's bound on the call beyond the agent's own: the tools service's own timeout
# is then never what ends a call, the agent's (named in its error) is.
_MARGIN = 5.0


@dataclass(eq=False)
class RemoteAgentCatalog:
    """The tools of remote agents, their cards read through `cards`. A card that could not
    be read is not asked for again for `retry_after` seconds, so an agent that does not
    answer delays one run's start, not each."""

    cards: RemoteCards
    _: KW_ONLY
    retry_after: float = RETRY_AFTER
    _failed: dict[bytes, float] = field(default_factory=dict, init=False)

    async def tools(self, agents: Iterable[RemoteAgent]) -> dict[str, Tool]:
        agents = list(agents)
        if not agents:
            return {}
        specs = await asyncio.gather(*(self._spec(a) for a in agents))
        return {
            spec.name: remote_agent_tool(self.cards, agent, Conversation(), spec)
            for agent, spec in zip(agents, specs, strict=True)
        }

    async def _spec(self, agent: RemoteAgent) -> ToolSpec:
        key = msgspec.json.encode(agent)
        now = asyncio.get_running_loop().time()
        failed = self._failed.get(key)
        if failed is not None and now - failed < self.retry_after:
            return spec_of(agent, None)
        try:
            card = await self.cards.card(agent)
        except RemoteAgentError as e:
            log.warning("remote agent's card not read; offering it as configured", error=str(e))
            self._failed[key] = now
            return spec_of(agent, None)
        self._failed.pop(key, None)
        return spec_of(agent, card)


def spec_of(agent: RemoteAgent, card: AgentCard | None) -> ToolSpec:
    """What the model is told of the agent: its description and the card's skills."""
    lines = [agent.description or (card.description if card else "") or f"The agent {agent.name}."]
    if card is not None and card.skills:
        lines.append("Its skills:")
        for skill in card.skills:
            about = f": {skill.description}" if skill.description else ""
            lines.append(f"- {skill.name or skill.id}{about}")
    return ToolSpec(name=agent.name, description="\n".join(lines), parameters=_PARAMETERS)


def remote_agent_tool(
    cards: RemoteCards,
    agent: RemoteAgent,
    conversation: Conversation,
    spec: ToolSpec | None = None,
) -> Tool:
    """The agent tool that sends a message to `agent` in `conversation`."""

    async def call(args: dict[str, Any], ctx: ToolContext) -> str:
        text = args.get(MESSAGE)
        if not isinstance(text, str) or not text.strip():
            raise ToolFailed(f"the tool {agent.name!r} takes a non-empty string `{MESSAGE}`")
        try:
            answer = await send(cards, agent, text, conversation, _message_id(ctx))
        except RemoteAgentError as e:
            raise ToolFailed(str(e)) from e
        conversation.context_id = answer.context_id or conversation.context_id
        conversation.task_id = answer.task_id
        return answer.text

    return Tool(
        spec=spec or ToolSpec(name=agent.name, parameters=_PARAMETERS),
        fn=call,
        timeout=agent.timeout + _MARGIN,
        max_attempts=1,
        remote_agent=agent,
    )


def _message_id(ctx: ToolContext) -> str:
    name = f"agency:{ctx.tenant_id}/{ctx.thread_id}/{ctx.call_id}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))
