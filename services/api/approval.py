"""A decision on the tool calls a paused run awaits, as every protocol reads it from its
client's answer (AG-UI's resume, the AI SDK's approval responses, LangGraph's `resume`,
A2A's message, our own `approve`), and the command that carries it to the runtime."""

from __future__ import annotations

from dataclasses import dataclass

from agency.contracts.commands import ApproveToolCalls
from agency.contracts.events import ToolCall


@dataclass(frozen=True, slots=True)
class Approval:
    """Approve every call (as asked, or as `modified`), or reject them all with `reason`."""

    approved: bool
    modified: tuple[ToolCall, ...] | None = None
    reason: str = ""

    def command(self, agency_id: str, thread_id: str, run_id: str) -> ApproveToolCalls:
        """The runtime's command for the run `run_id` (it does nothing once that run has
        moved on)."""
        return ApproveToolCalls(
            agency_id=agency_id,
            thread_id=thread_id,
            approved=self.approved,
            modified_tool_calls=self.modified,
            reason=self.reason,
            run_id=run_id,
        )
