"""A code agent with a settings schema, for the API and console tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from agency.contracts.events import ChatMessage
from agency.services.agents.code import CodeAgent

if TYPE_CHECKING:
    from agency import AgentContext

TUNER = "tuner"
TUNER_SETTINGS = {"tone": "warm"}


class Tuner(CodeAgent):
    """Replies with its tone and the message: what a run's settings were is in its reply."""

    description = "Answers in the tone of its settings."

    class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
        tone: str = "plain"
        temperature: float = 0.2
        max_words: int = 100
        topics: list[str] = []

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> str:
        return f"{ctx.settings.tone} ({ctx.settings.max_words}): {message.content}"
