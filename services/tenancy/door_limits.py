"""Limits a request meets at the door, before anything is stored or run.

- a blueprint's prompt (`max_prompt_bytes`, 64 KB): every model call of the blueprint sends
  it, so a larger one is refused where the blueprint is saved (over HTTP, LangGraph's
  assistants and the registry's NATS command alike);
- an invoke's messages (`max_invoke_messages`, 100; `max_invoke_bytes`, 256 KB, their
  text and tool call arguments together): refused where the invoke comes in (HTTP 400,
  LangGraph's runs, `request.rejected` on NATS), so an oversized request never joins, nor
  harms, the run it was queued behind.

The checks are pure; each answers why a request is refused, or None. 0 switches a byte
limit off; the message count is 1 to 500 (`MOST_INVOKE_MESSAGES`).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from agency.contracts.events import BlueprintSpec, ChatMessage
from agency.services.tenancy.settings_env import from_environ

PROMPT_LIMIT = "prompt_too_large"
MESSAGES_LIMIT = "too_many_messages"
MESSAGES_SIZE_LIMIT = "messages_too_large"
# A run's first append carries each message of its request besides its own events, and one
# append holds at most 1,000 events: more messages than this could never start a run.
MOST_INVOKE_MESSAGES = 500


class DoorLimits(msgspec.Struct, frozen=True, kw_only=True):
    max_prompt_bytes: int = 65_536
    max_invoke_messages: int = 100
    max_invoke_bytes: int = 262_144

    def __post_init__(self) -> None:
        if not 0 < self.max_invoke_messages <= MOST_INVOKE_MESSAGES:
            raise ValueError(
                f"AGENCY_MAX_INVOKE_MESSAGES is {self.max_invoke_messages}: it must be 1 to "
                f"{MOST_INVOKE_MESSAGES} (one append holds a run's first events and its "
                "request's messages)"
            )

    @classmethod
    def from_env(cls) -> DoorLimits:
        """`AGENCY_MAX_PROMPT_BYTES`, `AGENCY_MAX_INVOKE_MESSAGES`, `AGENCY_MAX_INVOKE_BYTES`."""
        return from_environ(cls, "AGENCY_")


def _prompts(blueprint: BlueprintSpec) -> Iterable[tuple[str, str]]:
    for spec in blueprint.with_inline():
        yield spec.name, spec.prompt
        for side in (spec.side_a, spec.side_b):
            if side is not None:
                yield spec.name, side.prompt


def prompt_problem(blueprint: BlueprintSpec, limits: DoorLimits) -> str | None:
    """Why the blueprint's prompt (or an inline subagent's, or a side's) is too large."""
    limit = limits.max_prompt_bytes
    if not limit:
        return None
    for name, prompt in _prompts(blueprint):
        size = len(prompt.encode())
        if size > limit:
            return (
                f"{PROMPT_LIMIT}: the prompt of blueprint {name[:64]!r} is {size} bytes, the "
                f"limit is {limit} bytes (AGENCY_MAX_PROMPT_BYTES); every model call sends "
                "it: shorten it or move the reference text into files or tools"
            )
    return None


def message_bytes(message: ChatMessage) -> int:
    return len(message.content.encode()) + sum(
        len(c.name) + len(c.arguments.encode()) for c in message.tool_calls
    )


def messages_problem(messages: Iterable[ChatMessage], limits: DoorLimits) -> str | None:
    """Why an invoke's messages are too many or too large."""
    listed = list(messages)
    if limits.max_invoke_messages and len(listed) > limits.max_invoke_messages:
        return (
            f"{MESSAGES_LIMIT}: the request has {len(listed)} messages, the limit is "
            f"{limits.max_invoke_messages} per invoke (AGENCY_MAX_INVOKE_MESSAGES)"
        )
    if limits.max_invoke_bytes:
        size = sum(message_bytes(m) for m in listed)
        if size > limits.max_invoke_bytes:
            return (
                f"{MESSAGES_SIZE_LIMIT}: the request's messages are {size} bytes, the limit "
                f"is {limits.max_invoke_bytes} bytes per invoke (AGENCY_MAX_INVOKE_BYTES)"
            )
    return None
