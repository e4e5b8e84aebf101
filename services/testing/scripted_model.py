"""`ScriptedModel`: a model that answers from a list of steps, in process or as the fake
server's script. Exported by `services.testing`, which tells how to use it."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agency.contracts.events.base import ChatMessage, ToolCall, Usage
from agency.services.llm.assembly import ModelResponse, OnDelta
from agency.services.llm.fake_scripts import Script, ScriptStep, ScriptToolCall, StepCount
from agency.services.llm.port import ModelRequest

# What a step past the end of the script answers, as the fake server does.
PAST_THE_END = "done"


@dataclass(frozen=True, slots=True)
class Step:
    """One model answer: text, tool calls, or both. Made by `call` and `reply`."""

    text: str = ""
    calls: tuple[tuple[str, str], ...] = ()

    def __add__(self, other: Step) -> Step:
        """Both in one answer: `call("a", {...}) + call("b", {...})`."""
        text = " ".join(t for t in (self.text, other.text) if t)
        return Step(text=text, calls=(*self.calls, *other.calls))


def call(name: str, arguments: Mapping[str, Any] | str | None = None, /, **kwargs: Any) -> Step:
    """A step calling `name` with `arguments` (a dict, keywords, or a string sent as it is:
    one that is not JSON tests how a tool takes broken arguments)."""
    if isinstance(arguments, str):
        if kwargs:
            raise TypeError("give a tool's arguments as a string or as keywords, not both")
        return Step(calls=((name, arguments),))
    merged = {**(arguments or {}), **kwargs}
    return Step(calls=((name, json.dumps(merged, ensure_ascii=False)),))


def reply(text: str) -> Step:
    """A step answering `text` (with no tool call it ends the run)."""
    return Step(text=text)


ScriptEntry = Step | Sequence[Step]


def _step_of(entry: ScriptEntry) -> Step:
    if isinstance(entry, Step):
        return entry
    merged = Step()
    for part in entry:
        merged = merged + part
    return merged


def step_index(messages: Sequence[ChatMessage], count: StepCount) -> int:
    """The answers so far: of the turn (since the latest user message), or all of them."""
    since = 0
    for message in reversed(messages):
        if message.role == "user" and count == "turn":
            return since
        since += message.role == "assistant"
    return since


class ScriptedModel:
    """A model answering from `steps`, counted per turn: step 0 answers each user message,
    step 1 the call after that answer's tool results, and so on; a step past the end
    answers "done". `count="conversation"` counts across the whole thread instead.

    It is a `Provider` (what the runtime calls) and records what it was asked in
    `requests`. `as_fake_script(key)` gives the same steps as the fake server's script.
    """

    def __init__(self, steps: Sequence[ScriptEntry], *, count: StepCount = "turn") -> None:
        self.steps = tuple(_step_of(e) for e in steps)
        self.count: StepCount = count
        self.requests: list[ModelRequest] = []

    async def complete(
        self, request: ModelRequest, on_delta: OnDelta | None = None
    ) -> ModelResponse:
        self.requests.append(request)
        index = step_index(request.messages, self.count)
        step = self.steps[index] if index < len(self.steps) else Step(text=PAST_THE_END)
        # Ids unique in the thread: its message count only grows.
        calls = tuple(
            ToolCall(id=f"call_{len(request.messages)}_{i}", name=name, arguments=args)
            for i, (name, args) in enumerate(step.calls)
        )
        if step.text and on_delta is not None:
            await on_delta(step.text)
        message = ChatMessage(role="assistant", content=step.text, tool_calls=calls)
        written = step.text + "".join(c.name + c.arguments for c in calls)
        read = sum(len(m.content) for m in request.messages)
        return ModelResponse(
            message=message,
            usage=Usage(
                input_tokens=math.ceil(read / 4), output_tokens=math.ceil(len(written) / 4)
            ),
            finish_reason="tool_calls" if calls else "stop",
            model=request.model,
        )

    def script_steps(self) -> tuple[ScriptStep, ...]:
        """The steps as the fake server's (`FakeLLMServer.script(key, steps, count=...)`)."""
        return tuple(
            ScriptStep(
                content=s.text,
                tool_calls=tuple(ScriptToolCall(name=n, arguments=a) for n, a in s.calls),
            )
            for s in self.steps
        )

    def as_fake_script(self, key: str) -> Script:
        """The body of the fake server's `POST /_scripts` (`msgspec.json.encode` it): a
        conversation whose system or user messages contain `key` is answered by these
        steps, counted as here."""
        return Script(key=key, steps=self.script_steps(), count=self.count)
