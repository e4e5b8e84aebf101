"""Test an app's tools, middleware and blueprints in plain pytest: no NATS, no PostgreSQL,
no network, no model.

    from agency.services.testing import AgentHarness, ScriptedModel, call, reply, run_tool

    result = await run_tool(system, "weather", {"city": "Paris"})
    assert result.output == "sunny in Paris for 1 day(s)"

    model = ScriptedModel([call("weather", city="Paris"), reply("It is sunny.")])
    harness = AgentHarness(system, blueprint="forecaster", model=model)
    transcript = await harness.run("Weather in Paris?")
    assert transcript.status == "completed" and transcript.answer == "It is sunny."

What is real: `run_tool` runs a tool as the tools service does (`services.tool_execution.executor`:
the arguments parsed and validated against the tool's signature, its timeout and retries,
the text the model is given, a failure as the error text the model sees). `AgentHarness`
drives a thread with the runtime's own loop (`ThreadDriver`, the decisions of
`services.runtime.actions`, the blueprint's middleware and every hook of theirs, state
tools such as `write_todos` and `write_file`, local tools, `config.hitl.tools` pausing
the run for approval, the step limit) on an in-memory event log, and runs each requested
tool as the tools service would, one after another. The model is a `ScriptedModel` (or
any `Provider`, such as an `OpenAIProvider` on the fake server).

What is not: nothing is durable (the log lives in the harness and goes with it), there is
one thread and no subagents (a `task` call leaves the run paused with reason
`subagent`), no workflow (a workflow context tool is the error it is outside one), no MCP
servers, no tenants' saved blueprints or variables, no pause between
a tool's attempts, and no projections or HTTP API: for those, run the system
(`docs/testing-apps.md`). A tool registered with `isolation` runs in its sandbox, as in
the tools service (bubblewrap must be installed).
"""

from agency.services.testing.harness import (
    AgentHarness,
    HarnessError,
    ToolCallRecord,
    ToolRun,
    Transcript,
    run_tool,
)
from agency.services.testing.scripted_model import ScriptedModel, Step, call, reply

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
