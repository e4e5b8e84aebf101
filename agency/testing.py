"""Test an app's tools, middleware and blueprints in plain pytest: no NATS, no PostgreSQL,
no network, no model (`docs/testing-apps.md`).

    from agency.testing import AgentHarness, ScriptedModel, call, reply, run_tool
"""

from agency.services.testing import (
    AgentHarness,
    HarnessError,
    ScriptedModel,
    Step,
    ToolCallRecord,
    ToolRun,
    Transcript,
    call,
    reply,
    run_tool,
)

__all__ = [
    "AgentHarness",
    "HarnessError",
    "ScriptedModel",
    "Step",
    "ToolCallRecord",
    "ToolRun",
    "Transcript",
    "call",
    "reply",
    "run_tool",
]
