"""Keeping a model request within a token budget.

Tokens are estimated at four characters each, the usual rule of thumb for English text;
the estimate only decides what to trim, the provider reports real usage. The oldest turns
go first, and an assistant message with tool calls is trimmed together with its tool
results, so no request ever carries a tool result without its call or the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass

from agency.contracts.events import ChatMessage


def estimate_tokens(message: ChatMessage) -> int:
    size = len(message.content) + sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
    return size // 4 + 4


@dataclass(frozen=True, slots=True)
class Trimmed:
    messages: list[ChatMessage]
    dropped: int
    tokens_before: int
    tokens_after: int


def _units(messages: list[ChatMessage]) -> list[list[ChatMessage]]:
    units: list[list[ChatMessage]] = []
    for message in messages:
        if (
            message.role == "tool"
            and units
            and (units[-1][0].tool_calls and units[-1][0].role == "assistant")
        ):
            units[-1].append(message)
        else:
            units.append([message])
    return units


def trim_to_budget(system: list[ChatMessage], history: list[ChatMessage], budget: int) -> Trimmed:
    fixed = sum(estimate_tokens(m) for m in system)
    units = _units(history)
    sizes = [sum(estimate_tokens(m) for m in unit) for unit in units]
    before = fixed + sum(sizes)
    total = before
    start = 0
    # Keep at least the newest unit: a request without the latest turn is useless.
    while total > budget and start < len(units) - 1:
        total -= sizes[start]
        start += 1
    kept = [m for unit in units[start:] for m in unit]
    return Trimmed(
        messages=kept,
        dropped=len(history) - len(kept),
        tokens_before=before,
        tokens_after=total,
    )
