"""The agent system that service processes started by the fault harness load with `--app`:
the runtime tests' agents (a `lookup` tool, HITL on `approver`, subagents on `manager`)."""

from __future__ import annotations

from tests.runtime.conftest import make_system

system = make_system()
