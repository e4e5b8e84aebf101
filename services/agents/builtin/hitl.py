"""Human in the loop: calls to the tools a blueprint lists wait for a person's decision.

Blueprint config: `{"hitl": {"tools": ["send_email", ...]}}`, which is enough to select this
middleware (the `hitl` tag selects it too, guarding nothing without the list). The run
pauses with reason `hitl`; approve runs the calls (or the person's modified versions),
reject answers each call with a tool message saying so, so no tool call is left without a
result.
"""

from __future__ import annotations

from agency.contracts.events import ChatMessage
from agency.contracts.events.blueprint import BlueprintConfig
from agency.services.agents.middleware import Middleware, MiddlewareContext


def guarded_tools(config: BlueprintConfig) -> frozenset[str]:
    return frozenset(config.hitl.tools) if config.hitl else frozenset()


class HitlMiddleware(Middleware):
    name = "hitl"
    tags = ("hitl",)

    def wanted_by(self, config: BlueprintConfig) -> bool:
        return bool(guarded_tools(config))

    async def on_model_result(self, ctx: MiddlewareContext, message: ChatMessage) -> None:
        guarded = guarded_tools(ctx.config)
        held = [c for c in message.tool_calls if c.name in guarded]
        if held:
            ctx.hold_for_approval(held)
