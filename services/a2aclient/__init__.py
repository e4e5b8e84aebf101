"""Remote A2A agents as agent tools: cards, messages, tools (`docs/protocols.md`)."""

from agency.services.a2aclient.calls import Conversation
from agency.services.a2aclient.cards import RemoteAgentError, RemoteCards
from agency.services.a2aclient.tools import RemoteAgentCatalog, remote_agent_tool

__all__ = [
    "Conversation",
    "RemoteAgentCatalog",
    "RemoteAgentError",
    "RemoteCards",
    "remote_agent_tool",
]
