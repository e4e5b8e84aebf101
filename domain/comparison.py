"""Comparing what a re-execution produced with what the record holds.

Events are compared by type and payload with ids left out (run, call, child and event ids,
tokens): what remains is what the runtime decided, such as tool calls (name and arguments),
message roles and contents, middleware names, results and errors. Timestamps and sequence
numbers live in the envelope and are never compared; streamed deltas are not compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from agency.contracts.records import RecordedEvent
from agency.domain.event_text import clip
from agency.domain.timeline import summary as event_summary

# `upto_seq` (a checkpoint's position) is a sequence number, which deltas shift.
IGNORED_FIELDS: frozenset[str] = frozenset(
    # Sealed values differ at every seal (a fresh nonce), whatever they hold; re-execution
    # makes no deltas, so a checkpoint's position differs (its hash is compared). Where a
    # tool raised names a file, which moves with the checkout; the error itself is compared.
    {
        "run_id",
        "tool_call_id",
        "id",
        "child_thread_id",
        "token",
        "event_id",
        "sealed_env",
        "upto_seq",
        "raised_at",
    }
)
_COLUMN = 58


def signature(event: RecordedEvent) -> dict[str, Any]:
    """The comparable content of an event: its type and payload without ids."""
    data = msgspec.to_builtins(event.envelope.payload)
    stripped = _strip(data)
    assert isinstance(stripped, dict)
    stripped["type"] = event.type
    return stripped


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in IGNORED_FIELDS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two signatures differ, as `path: left ≠ right`, outermost first."""
    if isinstance(left, dict) and isinstance(right, dict):
        found: list[str] = []
        for key in (*left, *(k for k in right if k not in left)):
            where = f"{path}.{key}" if path else str(key)
            found.extend(differences(left.get(key), right.get(key), where))
        return found
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        found = []
        for i, (a, b) in enumerate(zip(left, right, strict=True)):
            found.extend(differences(a, b, f"{path}[{i}]"))
        return found
    if left == right:
        return []
    return [f"{path or 'value'}: {clip(repr(left), 50)} ≠ {clip(repr(right), 50)}"]


@dataclass(frozen=True, slots=True)
class Divergence:
    index: int
    recorded: RecordedEvent | None
    reexecuted: RecordedEvent | None
    differences: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Comparison:
    thread_id: str
    compared: int
    divergence: Divergence | None
    # Why the re-execution ended early: the record ran out (a note), or the code raised.
    stopped: str | None = None
    failed: str | None = None
    # Both sides in full, for views that show them side by side.
    recorded: tuple[RecordedEvent, ...] = ()
    reexecuted: tuple[RecordedEvent, ...] = ()

    @property
    def same(self) -> bool:
        return self.divergence is None and self.failed is None


def compare(
    thread_id: str,
    recorded: Sequence[RecordedEvent],
    reexecuted: Sequence[RecordedEvent],
    stopped: str | None = None,
    failed: str | None = None,
) -> Comparison:
    left_all, right_all = tuple(recorded), tuple(reexecuted)
    for i in range(max(len(recorded), len(reexecuted))):
        left = recorded[i] if i < len(recorded) else None
        right = reexecuted[i] if i < len(reexecuted) else None
        if left is None or right is None:
            missing = "the record ends here" if left is None else "the re-execution ends here"
            divergence = Divergence(i, left, right, (missing,))
            return Comparison(thread_id, i, divergence, stopped, failed, left_all, right_all)
        if left.type != right.type:
            # Other fields of two different event types are noise beside the type.
            found = [f"type: {left.type} ≠ {right.type}"]
        else:
            found = differences(signature(left), signature(right))
        if found:
            divergence = Divergence(i, left, right, tuple(found))
            return Comparison(thread_id, i, divergence, stopped, failed, left_all, right_all)
    return Comparison(thread_id, len(recorded), None, stopped, failed, left_all, right_all)


def _cell(event: RecordedEvent | None) -> list[str]:
    if event is None:
        return ["(nothing)"]
    head = f"#{event.seq} {event.type}"
    summary = event_summary(event.envelope.payload)
    return [clip(head, _COLUMN), clip(summary, _COLUMN)] if summary else [clip(head, _COLUMN)]


def format_comparison(result: Comparison) -> list[str]:
    if result.divergence is None:
        verdict = "same" if result.failed is None else "failed after"
        lines = [f"thread {result.thread_id}: {verdict}: {result.compared} events compared"]
    else:
        d = result.divergence
        lines = [
            f"thread {result.thread_id}: diverged at produced event {d.index + 1} "
            f"({d.index} compared equal before it)",
            f"  {'recorded':<{_COLUMN}} │ re-executed",
        ]
        left, right = _cell(d.recorded), _cell(d.reexecuted)
        for i in range(max(len(left), len(right))):
            a = left[i] if i < len(left) else ""
            b = right[i] if i < len(right) else ""
            lines.append(f"  {a:<{_COLUMN}} │ {b}".rstrip())
        lines.extend(f"  differs: {item}" for item in d.differences[:5])
    if result.failed:
        lines.append(f"  error: {result.failed}")
    if result.stopped:
        lines.append(f"  note: {result.stopped}")
    return lines
