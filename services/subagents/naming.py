"""Deterministic names of what a spawn creates, so a redelivered request creates nothing new."""

from __future__ import annotations

from contracts.ids import derived_id


def child_thread_id(tenant_id: str, parent_thread_id: str, tool_call_id: str) -> str:
    return derived_id("th", tenant_id, parent_thread_id, tool_call_id)


def child_token(tenant_id: str, parent_thread_id: str, tool_call_id: str) -> str:
    return derived_id("tk", "token", tenant_id, parent_thread_id, tool_call_id)


def child_run_id(child_thread: str) -> str:
    return derived_id("run_", "first-run", child_thread)


def report_message(child_thread: str, outcome: str, report: str) -> str:
    if outcome == "completed":
        return f"Subagent (reference: {child_thread}) has returned the following result: {report}"
    return f"Subagent (reference: {child_thread}) ended with {outcome}: {report}"
