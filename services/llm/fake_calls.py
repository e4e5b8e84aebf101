"""The offline model calling the tools it is asked to: `CALL <tool> {json args}`.

A user message with one or more lines `CALL lookup {"word": "risky"}` makes the offline
model call those tools, each only if the request offers it; it answers in text instead
when one is not offered (listing those that are) or its arguments are not a JSON object.
Once the calls' results are back, it answers with a short text quoting them, which ends
the run. A person can so watch any tool of a blueprint run (and wait for approval)
without a provider key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from agency.services.llm.fake_request import ChatRequest, WireMessage

_CALL = re.compile(r"^\s*CALL\s+(?P<name>[A-Za-z0-9_.:-]+)(?:\s+(?P<args>.*?))?\s*$")
# How much of each result the answer quotes.
QUOTE_CHARS = 300


@dataclass(frozen=True, slots=True)
class Asked:
    """What the latest user message asks for: the calls, or why none can be made."""

    calls: tuple[tuple[str, str], ...] = ()
    refusal: str | None = None


def _turn(request: ChatRequest) -> tuple[WireMessage | None, list[WireMessage]]:
    """The latest user message and the messages after it."""
    for i in range(len(request.messages) - 1, -1, -1):
        if request.messages[i].role == "user":
            return request.messages[i], request.messages[i + 1 :]
    return None, []


def asked_calls(text: str, offered: frozenset[str]) -> Asked | None:
    """The `CALL` lines of a message, None if it has none."""
    found = [m for line in text.splitlines() if (m := _CALL.match(line))]
    if not found:
        return None
    calls: list[tuple[str, str]] = []
    for match in found:
        name, raw = match["name"], (match["args"] or "").strip() or "{}"
        if name not in offered:
            listed = ", ".join(sorted(offered)) or "none"
            return Asked(
                refusal=f"I cannot call {name}: it is not offered to me here. "
                f"The tools offered: {listed}."
            )
        try:
            args = json.loads(raw)
        except ValueError as e:
            return Asked(refusal=f"I cannot call {name}: its arguments are not JSON ({e}).")
        if not isinstance(args, dict):
            return Asked(refusal=f"I cannot call {name}: its arguments must be a JSON object.")
        calls.append((name, json.dumps(args, ensure_ascii=False)))
    return Asked(calls=tuple(calls))


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= QUOTE_CHARS else flat[: QUOTE_CHARS - 1].rstrip() + "…"


def call_reply(request: ChatRequest) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """(text, calls) answering a turn whose user message has `CALL` lines; None for any
    other turn. Calls first; once their results are in, a text quoting each."""
    ask, after = _turn(request)
    if ask is None:
        return None
    asked = asked_calls(ask.text, request.tool_names)
    if asked is None:
        return None
    if asked.refusal is not None:
        return asked.refusal, ()
    names = {c.id: c.function.name for m in after for c in m.tool_calls or ()}
    if not names:
        called = ", ".join(name for name, _ in asked.calls)
        return f"Calling {called}.", asked.calls
    results = [
        f"{names.get(m.tool_call_id or '', 'a tool')} answered: {_shorten(m.text)}"
        for m in after
        if m.role == "tool"
    ]
    return "Done. " + "; ".join(results or ["no result came back"]), ()
