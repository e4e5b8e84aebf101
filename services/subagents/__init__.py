"""Subagent coordination: child threads spawned by tool calls, reporting back to parents."""
