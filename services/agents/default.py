"""The agent system services load when no `--app` is given."""

from __future__ import annotations

from agency.contracts.events import BlueprintSpec
from agency.services.agents.system import AgentSystem

ASSISTANT_PROMPT = (
    "You are a careful assistant. Plan multi-step work, keep notes in files, "
    "and finish with a short answer."
)


def build() -> AgentSystem:
    return (
        AgentSystem()
        .defaults()
        .add_agent(
            BlueprintSpec(
                name="assistant",
                description="A general assistant with planning and a virtual filesystem.",
                prompt=ASSISTANT_PROMPT,
                tags=("default",),
            )
        )
    )


system = build()
