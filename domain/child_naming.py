"""Deterministic names of what a spawn creates, so a redelivered request creates nothing new."""

from __future__ import annotations

from agency.contracts.ids import derived_id


def child_thread_id(tenant_id: str, parent_thread_id: str, tool_call_id: str) -> str:
    return derived_id("th", tenant_id, parent_thread_id, tool_call_id)


def child_token(tenant_id: str, parent_thread_id: str, tool_call_id: str) -> str:
    return derived_id("tk", "token", tenant_id, parent_thread_id, tool_call_id)


def child_run_id(child_thread: str) -> str:
    return derived_id("run_", "first-run", child_thread)


def message_run_id(child_thread: str, tool_call_id: str) -> str:
    """The child's run started by a `subagent_message` call."""
    return derived_id("run_", "message", child_thread, tool_call_id)


def thread_name(subagent_type: str, name: str | None) -> str:
    """How the child's thread is named in its parent's registry: its blueprint, and the
    instance's name for a resumable child (`helper/scribe`)."""
    return f"{subagent_type}/{name}" if name else subagent_type


def returned_path(child_thread: str, path: str) -> str:
    """Where a child's returned file lands in the parent: under the child's reference, so
    files of different children never overwrite each other or the parent's own."""
    return f"subagents/{child_thread}/{path.lstrip('/')}"


def notice_message(child_thread: str, content: str) -> str:
    """What a child's `notify_parent` puts in the parent's conversation."""
    return f"Subagent (reference: {child_thread}) notifies you:\n\n{content}"


def report_message(
    child_thread: str, outcome: str, report: str, attachments: tuple[str, ...] = ()
) -> str:
    if outcome == "completed":
        text = (
            f"Subagent (reference: {child_thread}) has returned the following result:\n\n{report}"
        )
    else:
        text = (
            f"Subagent (reference: {child_thread}) has reported a failure ({outcome}):\n\n{report}"
        )
    if attachments:
        text += "\n\nReturned attachments: " + ", ".join(attachments)
    return text
